r"""Multi-GPU (or multi-process CPU) evaluation: the test set is sharded over the ranks of a
``torchrun`` job, each rank tunes its images, and rank 0 merges the per-image records in index
order and computes exactly the metrics of a one-process run.

    torchrun --nproc_per_node 4 -m argtca.run --root $DATA \
        --dataset-config-file configs/datasets/caltech101.yaml \
        --config-file configs/trainers/tca.yaml \
        --output-dir output/tca/caltech101/seed1 TTA.ENGINE fast

(``argtca.run`` calls :func:`distributed_test` when ``WORLD_SIZE`` > 1.) Why the results equal one
process: the views of item ``i`` depend on ``(SEED, i)`` only, and an image's episode never sees
another image (the fast engine is exact per image), so which rank tunes an image does not matter.

Records: rank ``r`` appends its images to ``records.rank<r>.jsonl`` in the output directory (flushed
per batch, as the one-process loop does), so an interrupted job resumes: at start, rank 0 folds
any rank files into ``records.jsonl``, and every rank skips the images already recorded. At the
end rank 0 writes the merged ``records.jsonl`` (sorted by index) and ``summary.json``. The ranks
must share the output directory (one node, or a shared file system). NCCL on CUDA (one GPU per
rank, ``cuda:LOCAL_RANK``), gloo on CPU. A job that fails before any rank's loop starts (weights
missing, one rank unable to build its model) stops every rank with the error and leaves no folder
behind, as a one-process run: both go through one :class:`~argtca.run_folder.RunSession`
(argtca/run_folder/session.py), rank 0 doing the folder's work for the job.

Work done once per dataset is split too where it can be: when every rank uses the Jacobian at θ0
(grad mode "jacobian"), each computes 1/N of its rows and the ranks all-gather them
(:func:`argtca.engine.distributed.share_jacobian`), so that start-up shrinks with N instead of
being repeated by each rank.
"""
from __future__ import annotations

import os
import time
from typing import Dict, Optional

import torch
import torch.distributed as dist

from argtca.engine.distributed import dist_env, share_jacobian, shard_indices, world_size
from argtca.run_folder import RecordWriter, fold_rank_files, load_records

__all__ = ["distributed_test", "said_once"]

# a rank whose error rank 0 reports waits this long for torchrun to end it after rank 0
LINGER_S = 120.0
_SETUP_KEY = "argtca/setup-error/{run}/{attempt}"


# ------------------------------------------------------------------ one error line for the job
# Every rank of a torchrun job reads the same command and files, so most errors (a missing
# weights file, a bad key, an unwritable folder) are met by every rank: rank 0 alone says it. A
# rank whose error rank 0 reports stays quiet and waits to be ended by torchrun's agent (which
# stops every rank once one fails) rather than exiting first: rank 0's line is out by then.
def _under_agent() -> bool:
    """Started by torchrun's agent, with other ranks."""
    return world_size() > 1 and bool(os.environ.get("TORCHELASTIC_RUN_ID"))


def _leave_it_to_rank0() -> None:
    """Say nothing: wait for the agent to end this rank after rank 0, exit 2 if it does not."""
    end = time.time() + LINGER_S
    while time.time() < end:
        time.sleep(0.2)
    raise SystemExit(2)


def _message(e: BaseException) -> str:
    return str(e.code) if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"


def _agent_store():
    """torchrun's agent store (the one its ranks rendezvous in), None when there is none."""
    if not _under_agent() or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    from datetime import timedelta
    try:
        return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                             is_master=False, timeout=timedelta(seconds=LINGER_S))
    except Exception:   # noqa: BLE001 (no store: every rank says its own error, as before)
        return None


class said_once:
    """``with said_once():`` around what each rank does before the job's process group
    (reading the command, the config, the plug-ins, the weights). Under torchrun, rank 0 posts
    how its part ended in the agent's store; another rank that fails the way rank 0 did leaves
    the line to rank 0 (:func:`_leave_it_to_rank0`), and says its own error otherwise."""

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb) -> bool:
        if isinstance(e, KeyboardInterrupt) or not _under_agent():
            return False
        rank = dist_env()[0]
        if rank != 0 and e is None:
            return False
        store = _agent_store()
        if store is None:
            return False
        key = _SETUP_KEY.format(run=os.environ.get("TORCHELASTIC_RUN_ID"),
                                attempt=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        try:
            if rank == 0:
                store.set(key, "" if e is None else _message(e))
                return False
            store.wait([key])
            told = store.get(key).decode("utf-8", errors="replace")
        except Exception:   # noqa: BLE001 (no answer: say this rank's own error)
            return False
        if told == _message(e):
            _leave_it_to_rank0()
        return False


def _barrier():
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def _agree(err: Optional[BaseException]) -> None:
    """Collective (every rank calls it, a barrier too): each rank says whether its step failed.
    A rank that failed raises its own error; the others one naming the first rank that failed,
    so that no rank waits for a peer that will never come."""
    said = [None] * dist.get_world_size()
    dist.all_gather_object(said, None if err is None else _message(err))
    bad = [(r, m) for r, m in enumerate(said) if m is not None]
    if not bad:
        return
    told = said[0] if said[0] is not None else bad[0][1]   # what rank 0 says below
    mine = said[dist.get_rank()]
    if dist.get_rank() != 0 and _under_agent() and (mine is None or mine == told):
        _leave_it_to_rank0()
    if err is not None:
        raise err
    raise RuntimeError(f"rank {bad[0][0]} of the torchrun job failed before the first "
                       f"image: {bad[0][1]}")


def _folder_agreed(err: Optional[BaseException]) -> None:
    """Collective (``RunSession``'s ``agree``): rank 0's refusal of the folder (locked, another
    fingerprint, bad records) reaches every rank as one RunFolderError; rank 0 says it."""
    problem = [None if err is None else str(err)]
    if dist.get_backend() == "nccl":
        dist.broadcast_object_list(problem, src=0,
                                   device=torch.device("cuda", torch.cuda.current_device()))
    else:
        dist.broadcast_object_list(problem, src=0)
    if problem[0] is not None:
        from argtca.run_folder import RunFolderError
        if dist.get_rank() != 0 and _under_agent():   # rank 0 says it
            _leave_it_to_rank0()
        raise RunFolderError(problem[0])


def distributed_test(trainer, backend: str = "") -> Dict[str, object]:
    """Run ``trainer``'s evaluation sharded over the torchrun ranks; returns the summary (every
    rank gets rank 0's). Works with any :class:`~argtca.trainers.base.TestTimeTrainer`."""
    from argtca.utils.seed import set_random_seed

    rank, world, local = dist_env()
    cfg = trainer.cfg
    use_cuda = bool(cfg.USE_CUDA) and torch.cuda.is_available()
    backend = backend or ("nccl" if use_cuda else "gloo")
    own_group = not dist.is_initialized()
    if own_group:
        if use_cuda:
            torch.cuda.set_device(local)
        dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    trainer.device = torch.device(f"cuda:{local}") if use_cuda else torch.device("cpu")
    try:
        set_random_seed(int(cfg.SEED))
        out_dir = trainer.output_dir()
        trainer.fingerprint()   # config + test set + device + input file contents, every rank
        # rank 0 holds the folder's lock for the job and checks it; its refusals reach every
        # rank. A job that fails before its first record leaves nothing behind, as a
        # one-process run: every rank learns of any rank's failure before a loop starts (_agree)
        with trainer.run_session(out_dir, rank=rank, rank_files=True,
                                 agree=_folder_agreed) as session:
            return _sharded(trainer, session, rank, world)
    finally:
        if own_group:
            dist.destroy_process_group()


def _sharded(trainer, session, rank: int, world: int) -> Dict[str, object]:
    """Every rank's part of :func:`distributed_test` once rank 0 holds the checked folder."""
    from argtca.utils.console import progress
    cfg, out_dir, fp = trainer.cfg, session.out_dir, trainer.fingerprint()
    done = {r["index"] for r in load_records(os.path.join(out_dir, "records.jsonl"))}
    n_total = len(trainer.dataset.test)
    todo = [i for i in range(n_total) if i not in done]
    mine = shard_indices(todo, rank, world)
    # a method whose preparation writes what the others read (ArgTCA's Phase-1 cache, a
    # fitted temperature) builds on rank 0 first; the others build at once
    first = trainer.model is None and trainer.shared_build
    err, loader = None, None
    try:
        # the workers start before the model is built (TestTimeTrainer._test_in says why)
        loader = trainer.views_loader(mine).start() if mine else None
        if first and rank == 0:
            trainer.build_model()
    except Exception as e:
        err = e
    if first:
        _agree(err)
    if err is None and trainer.model is None:
        try:
            trainer.build_model()
        except Exception as e:
            err = e
    _agree(err)   # every rank built: the loop's time counts no other rank's build
    session.started()   # from here on a rank may have written a record
    t0 = time.time()
    share_jacobian(getattr(trainer, "engine", None), rank, world, bool(mine), trainer.device)
    clock = {}
    if mine:
        writer = RecordWriter(os.path.join(out_dir, f"records.rank{rank}.jsonl"))
        bar = progress(len(mine), 0, f"{trainer.display_label} {trainer.dataset.name} "
                       f"[rank 0 of {world}]", enabled=bool(cfg.VERBOSE and rank == 0))
        from argtca.utils.host import loop_threads
        from argtca.engine.pipeline import predictions
        try:
            with loop_threads(cfg):
                for batch, probs in predictions(trainer.engine, loader, clock):  # one in flight
                    recs = trainer.make_records(batch, probs)
                    writer.write(recs)
                    bar.update(len(recs))
        finally:
            writer.close()
            bar.close()
    mine_s = time.time() - t0
    _barrier()
    elapsed = time.time() - t0
    # each rank's timeline (its own loop, then waiting for the slowest rank) for the summary
    from argtca.engine.pipeline import loop_timing
    ranks = [None] * world
    dist.all_gather_object(ranks, dict(loop_timing(clock), loop_s=round(mine_s, 2),
                                       images=len(mine), rank=rank))
    timing = {"loop_s": round(elapsed, 2), "ranks": ranks}
    result = [None]
    if rank == 0:
        try:
            records = fold_rank_files(out_dir)
            missing = n_total - len(records)
            if missing:
                raise RuntimeError(f"{missing} of {n_total} images have no record after the "
                                   f"distributed run in {out_dir}; run again to finish them")
            summary = trainer.finish(out_dir, records, fp, elapsed, len(todo), timing)
            result[0] = dict(summary, world_size=world)
        except Exception as e:  # tell the other ranks instead of leaving them waiting
            result[0] = {"error": f"{type(e).__name__}: {e}"}
    if dist.get_backend() == "nccl":
        dist.broadcast_object_list(result, src=0, device=trainer.device)
    else:
        dist.broadcast_object_list(result, src=0)
    if "error" in result[0]:
        if rank != 0 and _under_agent():   # rank 0 says it
            _leave_it_to_rank0()
        raise RuntimeError(f"rank 0 could not merge the records: {result[0]['error']}")
    return result[0]
