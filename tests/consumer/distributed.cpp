// The component `distributed` as a user links it (find_package(vjit
// COMPONENTS distributed), target vjit::distributed), run as one process:
// Distributed::world is rank 0 of 1 and every sum returns its input.
//   consumer_distributed mpi|none   whether vjit was built with MPI
// Exit status 0 only when the sums, the rank and the size are those, and
// Distributed::available() says what the argument says.
#include <cstdio>
#include <string>
#include <vector>

#include <vjit/vjit.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_distributed mpi|none\n");
    return 2;
  }
  const bool expect_mpi = std::string(argv[1]) == "mpi";
  auto world = vjit::Distributed::world();
  std::vector<float> values{1.5f, -2.0f, 4.25f};
  world->allreduce_sum(values);
  const double total = world->allreduce_sum(3.5);
  const bool sums_right = values == std::vector<float>{1.5f, -2.0f, 4.25f} && total == 3.5;
  std::printf("consumer_distributed: rank %d of %d, MPI %s, sums %s\n", world->rank(), world->size(),
              vjit::Distributed::available() ? "yes" : "no", sums_right ? "right" : "WRONG");
  return sums_right && world->rank() == 0 && world->size() == 1 && vjit::Distributed::available() == expect_mpi ? 0
                                                                                                                 : 1;
}
