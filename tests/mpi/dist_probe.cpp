// Exercises dist::world() and prints what every rank saw, as JSON lines gathered on rank 0;
// test_mpi runs it under mpirun and checks the lines (communicator_test in mpi_test.cpp).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/dist.hpp"

int main() {
  masque::dist::Communicator& comm = masque::dist::world();
  const int r = comm.rank();
  // Terms whose float sum depends on the order: ((1 + 1e8) + -1e8) = 0, (1 + (1e8 + -1e8)) = 1.
  const float order_terms[3] = {1.0f, 1e8f, -1e8f};
  std::vector<float> f(5000000, 0.0f);  // more than one piece of the reduction
  f[0] = order_terms[r % 3];
  f.back() = static_cast<float>(r + 1);
  comm.all_reduce_sum(f);
  std::vector<double> d = {0.1 * (r + 1), 1.0 / 3.0};
  comm.all_reduce_sum(d);
  std::vector<std::uint64_t> u = {static_cast<std::uint64_t>(r) + 1};
  comm.all_reduce_sum(u);
  std::string message = r == 0 ? "from rank 0" : "";
  comm.broadcast(message, 0);
  std::string name = "r";
  name += std::to_string(r);
  const std::vector<std::string> everyone = comm.all_gather(name);
  std::string echoed;
  if (comm.size() > 1) {
    if (r == 1) comm.send(std::string(3u << 20, 'x') + "end", 0, 7);
    if (r == 0) echoed = comm.receive(1, 7);
  }
  comm.barrier();
  std::uint32_t f0 = 0;
  std::memcpy(&f0, &f[0], sizeof f0);
  nlohmann::json line = {
      {"rank", r},
      {"size", comm.size()},
      {"local_rank", comm.local_rank()},
      {"local_size", comm.local_size()},
      {"uses_mpi", comm.uses_mpi()},
      {"host", comm.host()},
      {"f0_bits", f0},
      {"f_last", f.back()},
      {"d", d},
      {"u", u[0]},
      {"message", message},
      {"everyone", everyone},
      {"echoed_bytes", echoed.size()},
      {"echoed_tail", echoed.size() > 3 ? echoed.substr(echoed.size() - 3) : ""}};
  const std::vector<std::string> lines = comm.gather(line.dump(), 0);
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  return 0;
}
