// doctest under MPI: every rank runs every test case in the same order (their collectives match
// one another), rank 0 reports in full and the others only their failures; the program fails
// when any rank failed. Run it under mpirun (ctest: mpi.ranks2, mpi.ranks4).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int failed = 0;
  {
    doctest::Context context(argc, argv);
    if (rank != 0) context.setOption("minimal", true);
    failed = context.run() != 0 ? 1 : 0;
    if (context.shouldExit()) {
      MPI_Finalize();
      return failed;
    }
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
