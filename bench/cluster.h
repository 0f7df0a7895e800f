/*
 * bench/cluster: `ckstore-bench cluster`, the erasure-coded cluster part of
 * the benchmark (docs/BENCHMARKS_CLUSTER.md). It starts a local cluster of
 * ckstore-server processes (or uses a running one), forks client processes,
 * and measures snapshots (STORED, PROTECTED), restores (healthy and with
 * servers killed) and full versus partial-expert (PEC) checkpoints, with the
 * references of the same run: raw ISA-L encode/decode, memcpy, raw UCX.
 * Records go out through report.c, in the same JSON shape as the
 * single-server bench.
 */
#ifndef CKS_BENCH_CLUSTER_H
#define CKS_BENCH_CLUSTER_H

/** `ckstore-bench cluster [options]`: argv[0] is "cluster". Returns the exit
 *  status (0 ran, 1 failed, 2 bad options). */
int cks_bench_cluster_main(int argc, char **argv);
/* gpu.c: `--gpu` (single server, or cluster = 1); 0 without a device. */
int cks_bench_gpu_main(int argc, char **argv, int cluster);

#endif
