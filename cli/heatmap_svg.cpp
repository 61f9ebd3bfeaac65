#include "heatmap_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace masque::cli {

namespace {

constexpr int kCell = 22;       // pixels per cell
constexpr int kLabelRoom = 90;  // room for the row labels and the rotated column labels
constexpr int kTitleRoom = 22;  // a panel's title line
constexpr int kGap = 28;        // between panels
constexpr int kHeader = 30;     // the picture's title

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double v, const char* format = "%.9g") {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
}

// White to dark blue; masked cells are light grey whatever their value.
std::string colour(double p) {
  p = std::clamp(p, 0.0, 1.0);
  const auto mix = [&](int from, int to) {
    return static_cast<int>(std::lround(from + (to - from) * p));
  };
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "#%02x%02x%02x", mix(247, 8), mix(251, 48), mix(255, 107));
  return buffer;
}

void panel(std::string& svg, const Heatmap& map, const HeatmapPanel& p, int x0, int y0) {
  const auto n = static_cast<std::int64_t>(map.labels.size());
  svg += "<g class=\"panel\" data-head=\"" + std::to_string(p.head) + "\">\n";
  svg += "<text x=\"" + std::to_string(x0 + kLabelRoom) + "\" y=\"" + std::to_string(y0 + 14) +
         "\" font-weight=\"bold\">" + escape(p.title) + "</text>\n";
  const int top = y0 + kTitleRoom + kLabelRoom, left = x0 + kLabelRoom;
  for (std::int64_t j = 0; j < n; ++j) {  // column labels, rotated
    const int x = left + static_cast<int>(j) * kCell + kCell / 2, y = top - 4;
    svg += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) +
           "\" transform=\"rotate(-60 " + std::to_string(x) + " " + std::to_string(y) + ")\">" +
           escape(map.labels[j]) + "</text>\n";
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const int y = top + static_cast<int>(i) * kCell;
    svg += "<text x=\"" + std::to_string(left - 4) + "\" y=\"" + std::to_string(y + 15) +
           "\" text-anchor=\"end\">" + escape(map.labels[i]) + "</text>\n";
    for (std::int64_t j = 0; j < n; ++j) {
      const bool allowed = map.allowed[i * n + j] != 0;
      const bool probabilities = !p.values.empty();
      const double v = probabilities ? p.values[i * n + j] : (allowed ? 1.0 : 0.0);
      svg += "<rect class=\"cell\" x=\"" + std::to_string(left + static_cast<int>(j) * kCell) +
             "\" y=\"" + std::to_string(y) + "\" width=\"" + std::to_string(kCell) +
             "\" height=\"" + std::to_string(kCell) + "\" fill=\"" +
             (allowed ? colour(probabilities ? v : 0.75) : std::string("#e4e4e4")) +
             "\" data-head=\"" + std::to_string(p.head) + "\" data-row=\"" + std::to_string(i) +
             "\" data-col=\"" + std::to_string(j) + "\" data-allowed=\"" + (allowed ? "1" : "0") +
             "\"";
      if (probabilities) svg += " data-p=\"" + number(v) + "\"";
      svg += "><title>" + escape(map.labels[i]) + " → " + escape(map.labels[j]) +
             (probabilities ? ": " + number(v, "%.4f")
                            : std::string(allowed ? ": allowed" : ": masked")) +
             "</title></rect>\n";
    }
  }
  svg += "</g>\n";
}

}  // namespace

std::string render_svg(const Heatmap& map) {
  const int n = static_cast<int>(map.labels.size());
  const int side = kLabelRoom + n * kCell;
  const int panel_w = side + kGap, panel_h = kTitleRoom + side + kGap;
  const int count = static_cast<int>(map.panels.size());
  const int columns = std::max(1, std::min(map.columns, count));
  const int lines = (count + columns - 1) / columns;
  // Wide enough for the title too (about 7 pixels a character at 13 pixels).
  const int width = std::max(columns * panel_w, 16 + 7 * static_cast<int>(map.title.size()));
  const int height = kHeader + lines * panel_h;
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
         "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) +
         " " + std::to_string(height) +
         "\" font-family=\"sans-serif\" font-size=\"11\" data-tokens=\"" + std::to_string(n) +
         "\">\n";
  svg += "<desc>rows = queries, columns = keys; grey = masked; darker = more attention</desc>\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"8\" y=\"20\" font-size=\"13\" font-weight=\"bold\">" + escape(map.title) +
         "</text>\n";
  for (int k = 0; k < count; ++k)
    panel(svg, map, map.panels[k], (k % columns) * panel_w, kHeader + (k / columns) * panel_h);
  svg += "</svg>\n";
  return svg;
}

std::vector<std::uint8_t> allowed_cells(const SequenceMask& mask) {
  const std::size_t n = mask.size();
  std::vector<std::uint8_t> cells(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < n; ++k) cells[i * n + k] = mask.allowed(i, k) ? 1 : 0;
  return cells;
}

}  // namespace masque::cli
