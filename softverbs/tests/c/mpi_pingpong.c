/* Two MPI ranks over softverbs: a ping-pong from 8 B to 4 MiB, rank 1 changing every
 * byte on the way back and rank 0 checking every byte, then one-sided MPI_Put and
 * MPI_Get of 1 MiB through a window, checked on both sides. Exits non-zero on any
 * mismatch; rank 0 prints one line per part. Built with mpicc by tests/mpi.rs. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define WIN (1 << 20)

static unsigned char pattern(long i, long salt) { return (unsigned char)(i * 131 + salt * 7 + 1); }

static int ping_pong(int rank) {
    int bad = 0;
    for (long n = 8; n <= 4L << 20; n *= 2) {
        unsigned char *b = malloc(n);
        if (!b) return 1;
        for (int it = 0; it < 4; it++) {
            long salt = n + it;
            if (rank == 0) {
                for (long i = 0; i < n; i++) b[i] = pattern(i, salt);
                MPI_Send(b, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(b, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (long i = 0; i < n; i++)
                    if (b[i] != (unsigned char)(pattern(i, salt) + 1)) { bad++; break; }
            } else {
                MPI_Recv(b, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (long i = 0; i < n; i++) {
                    if (b[i] != pattern(i, salt)) { bad++; break; }
                }
                for (long i = 0; i < n; i++) b[i]++;
                MPI_Send(b, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
            }
        }
        free(b);
    }
    return bad;
}

static int one_sided(int rank) {
    unsigned char *mem, *local = malloc(WIN);
    MPI_Win win;
    int bad = 0;
    if (!local || MPI_Alloc_mem(WIN, MPI_INFO_NULL, &mem) != MPI_SUCCESS) return 1;
    for (long i = 0; i < WIN; i++) mem[i] = pattern(i, 1000 + rank);
    MPI_Win_create(mem, WIN, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    /* Rank 0 reads rank 1's window, then writes its own pattern into it. */
    MPI_Win_fence(0, win);
    if (rank == 0) MPI_Get(local, WIN, MPI_BYTE, 1, 0, WIN, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    if (rank == 0) {
        for (long i = 0; i < WIN; i++)
            if (local[i] != pattern(i, 1001)) { bad++; break; }
        for (long i = 0; i < WIN; i++) local[i] = pattern(i, 2000);
        MPI_Put(local, WIN, MPI_BYTE, 1, 0, WIN, MPI_BYTE, win);
    }
    MPI_Win_fence(0, win);
    if (rank == 1)
        for (long i = 0; i < WIN; i++)
            if (mem[i] != pattern(i, 2000)) { bad++; break; }
    MPI_Win_free(&win);
    MPI_Free_mem(mem);
    free(local);
    return bad;
}

int main(int argc, char **argv) {
    int rank, size, bad, all;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "run with 2 ranks, not %d\n", size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    bad = ping_pong(rank);
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("ping-pong 8 B to 4 MiB: %s\n", all ? "MISMATCH" : "every byte checked");
    int bad2 = one_sided(rank), all2;
    MPI_Allreduce(&bad2, &all2, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("MPI_Get and MPI_Put of 1 MiB: %s\n", all2 ? "MISMATCH" : "every byte checked");
    MPI_Finalize();
    return all || all2;
}
