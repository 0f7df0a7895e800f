"""Ranks forked from a worker script (abort_worker.py, dcp_worker.py): each
rank runs a function in a process of its own; the script waits for all."""
import multiprocessing as mp
import os
import sys
import traceback


def _child(fn, rank, args):
    """A rank's process: fn(rank, *args) on one torch thread; exit status 0
    when it returned, 1 (with the traceback) when it raised."""
    try:
        import torch

        torch.set_num_threads(1)
        fn(rank, *args)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


def run_ranks(fn, world, args, timeout):
    """fn(rank, *args) for ranks 0 .. world - 1, each in a forked process
    (fork: call it before any client or thread). 0 when every rank exited
    with 0 within `timeout` s of the last one's; 1 otherwise (a rank still
    running then is killed, and named)."""
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_child, args=(fn, r, args)) for r in range(world)]
    for p in procs:
        p.start()
    rc = 0
    for p in procs:
        p.join(timeout)
        if p.exitcode is None:
            p.kill()
            p.join(10)
            print(f"rank pid {p.pid} did not finish in {timeout} s", flush=True)
            rc = 1
        elif p.exitcode != 0:
            rc = 1
    return rc
