// SVG heatmaps of attention over a token sequence: `masque attention` (the probabilities of
// one head, or of every head of a layer as a grid of panels) and `masque mask --format svg`
// (which cells a mask strategy allows). Rows are queries, columns keys, both labelled with the
// tokens. Every cell carries its numbers (data-head, data-row, data-col, data-allowed and, for
// probabilities, data-p), so a program can read the picture back.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "masque/mask.hpp"

namespace masque::cli {

struct HeatmapPanel {
  std::string title;          // e.g. "head 3"
  std::int32_t head = -1;     // data-head of the cells (-1: none)
  std::vector<float> values;  // n*n probabilities, or empty: only what is allowed
};

struct Heatmap {
  std::string title;
  std::vector<std::string> labels;    // n tokens
  std::vector<std::uint8_t> allowed;  // n*n, row-major (query, key)
  std::vector<HeatmapPanel> panels;   // laid out in a grid, at most `columns` per line
  std::int32_t columns = 4;
};

std::string render_svg(const Heatmap& map);

// The pattern of a built sequence mask, row-major (query, key): 1 where attention is allowed.
std::vector<std::uint8_t> allowed_cells(const SequenceMask& mask);

}  // namespace masque::cli
