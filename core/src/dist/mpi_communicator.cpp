#include "dist/mpi_communicator.hpp"

#include "masque/error.hpp"

#ifdef MASQUE_WITH_MPI

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace masque::dist {

namespace {

// Pieces small enough for MPI's int counts and for the root's gather buffer.
constexpr std::size_t kPiece = std::size_t{1} << 22;

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw RuntimeError(std::string(what) + " failed: " + std::string(text, length));
}

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
template <>
MPI_Datatype mpi_type<std::uint64_t>() {
  return MPI_UINT64_T;
}

void finalize_at_exit() {
  finalize_mpi();
}

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
    // Errors come back as codes (turned into exceptions), not as an abort inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    host_ = host_name();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  const std::string& host() const override { return host_; }
  bool uses_mpi() const override { return true; }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  void all_reduce_sum(std::span<float> data) override { reduce_in_order(data); }
  void all_reduce_sum(std::span<double> data) override { reduce_in_order(data); }
  void all_reduce_sum(std::span<std::uint64_t> data) override { reduce_in_order(data); }

  std::vector<std::string> gather(std::string_view bytes, int root) override {
    std::vector<int> sizes(rank_ == root ? size_ : 0);
    const int mine = checked_int(bytes.size());
    check(MPI_Gather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, MPI_COMM_WORLD),
          "MPI_Gather");
    std::vector<int> offsets(sizes.size());
    std::size_t total = 0;
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      offsets[r] = checked_int(total);
      total += static_cast<std::size_t>(sizes[r]);
    }
    std::string all(total, '\0');
    check(MPI_Gatherv(bytes.data(), mine, MPI_BYTE, all.data(), sizes.data(), offsets.data(),
                      MPI_BYTE, root, MPI_COMM_WORLD),
          "MPI_Gatherv");
    std::vector<std::string> out;
    for (std::size_t r = 0; r < sizes.size(); ++r)
      out.push_back(
          all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(sizes[r])));
    return out;
  }

  std::vector<std::string> all_gather(std::string_view bytes) override {
    std::vector<std::string> parts = gather(bytes, 0);
    std::string packed;
    for (const auto& p : parts) packed += std::to_string(p.size()) + ":" + p;
    broadcast(packed, 0);
    parts.clear();
    for (std::size_t at = 0; at < packed.size();) {
      const std::size_t colon = packed.find(':', at);
      const std::size_t n = std::stoull(packed.substr(at, colon - at));
      parts.push_back(packed.substr(colon + 1, n));
      at = colon + 1 + n;
    }
    return parts;
  }

  void broadcast(std::string& bytes, int root) override {
    std::uint64_t n = bytes.size();
    check(MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD), "MPI_Bcast");
    bytes.resize(n);
    for (std::size_t at = 0; at < n; at += kPiece) {
      const int count = static_cast<int>(std::min<std::size_t>(kPiece, n - at));
      check(MPI_Bcast(bytes.data() + at, count, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }

  void send(std::string_view bytes, int dest, int tag) override {
    std::uint64_t n = bytes.size();
    check(MPI_Send(&n, 1, MPI_UINT64_T, dest, tag, MPI_COMM_WORLD), "MPI_Send");
    for (std::size_t at = 0; at < n; at += kPiece) {
      const int count = static_cast<int>(std::min<std::size_t>(kPiece, n - at));
      check(MPI_Send(bytes.data() + at, count, MPI_BYTE, dest, tag, MPI_COMM_WORLD), "MPI_Send");
    }
  }

  std::string receive(int source, int tag) override {
    std::uint64_t n = 0;
    check(MPI_Recv(&n, 1, MPI_UINT64_T, source, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          "MPI_Recv");
    std::string bytes(n, '\0');
    for (std::size_t at = 0; at < n; at += kPiece) {
      const int count = static_cast<int>(std::min<std::size_t>(kPiece, n - at));
      check(MPI_Recv(bytes.data() + at, count, MPI_BYTE, source, tag, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE),
            "MPI_Recv");
    }
    return bytes;
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  static int checked_int(std::size_t n) {
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw RuntimeError("a message of " + std::to_string(n) + " bytes is over MPI's int limit");
    return static_cast<int>(n);
  }

  // Gather every rank's piece on rank 0, add them up in rank order there, broadcast the sum:
  // MPI_Allreduce may add in any order (a tree, a ring), which changes the low bits.
  template <class T>
  void reduce_in_order(std::span<T> data) {
    const std::size_t piece_size = std::min(kPiece, data.size());
    std::vector<T> all(rank_ == 0 ? piece_size * static_cast<std::size_t>(size_) : 0);
    for (std::size_t at = 0; at < data.size(); at += kPiece) {
      const std::size_t n = std::min(kPiece, data.size() - at);
      T* piece = data.data() + at;
      check(MPI_Gather(piece, static_cast<int>(n), mpi_type<T>(), all.data(), static_cast<int>(n),
                       mpi_type<T>(), 0, MPI_COMM_WORLD),
            "MPI_Gather");
      if (rank_ == 0)
        for (std::size_t i = 0; i < n; ++i) {
          T sum = all[i];
          for (std::size_t r = 1; r < static_cast<std::size_t>(size_); ++r) sum += all[r * n + i];
          piece[i] = sum;
        }
      check(MPI_Bcast(piece, static_cast<int>(n), mpi_type<T>(), 0, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
};

}  // namespace

std::unique_ptr<Communicator> mpi_world() {
  return std::make_unique<MpiWorld>();
}

void finalize_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string line(text, static_cast<std::size_t>(length));
  line = line.substr(0, line.find_first_of("\n,"));
  return line;
}

}  // namespace masque::dist

#else

namespace masque::dist {

std::unique_ptr<Communicator> mpi_world() {
  throw RuntimeError("this masque was built without MPI (see masque --version)");
}

std::string mpi_library_version() {
  return "not compiled in";
}

void finalize_mpi() {}

}  // namespace masque::dist

#endif
