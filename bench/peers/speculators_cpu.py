#!/usr/bin/env python3
"""speculators_cpu.py: `speculators train` (speculators 0.9.0) on a CPU, with the installed package unedited.

    python speculators_cpu.py --metrics FILE.jsonl [--threads N] -- SPECULATORS_TRAIN_FLAGS...

speculators' trainer assumes a GPU with no option to change it (speculators/train/trainer.py):
`self.model.to(self.local_rank)` (local_rank 0: cuda:0), `torch.accelerator.synchronize()` in its step
timer, and `torch.autocast(self.device_type, ...)` with device_type "cuda" (torch's accelerator: the
PyPI torch is a CUDA build, which names cuda even with no GPU). This wrapper makes three runtime
substitutions before it runs the package's own entry point (speculators.train.cli.main with
TrainConfig.resolve of the flags, what `speculators train` runs):

  1. device cpu: the trainer module's get_local_rank returns "cpu", so .to(local_rank) is .to("cpu"),
     and the checkpointer's get_current_device (where a resumed run loads its checkpoint and
     optimizer state: "cuda:0" otherwise) returns "cpu";
  2. torch.accelerator.synchronize is a no-op;
  3. autocast on the CPU: Trainer.device_type is "cpu" (set before the model is placed).

and two that only bound and record the run, changing no step:

  4. --max-steps: the trainer breaks out of an epoch at max_steps but then starts every remaining
     epoch (one more step, a checkpoint and a validation in each, with the LR past its schedule's
     end); here the run ends instead when an epoch would start at or past max_steps (the epoch that
     reached it has saved its checkpoint and run its validation by then);
  5. every metrics record the trainer logs (speculators.metrics: loss, accuracies, lr, the step's
     profile) goes to --metrics as a JSON line with the wall time since start, and a final line with
     the steps, the wall time, s per step (the trainer's own step_ms, fetch to optimizer step, mean
     over the logged steps but the first; and from the wall clock, validation and checkpoints
     included), the peak resident memory, and "finished" (max_steps reached). A signal makes
     speculators save ckpt/interrupted and return: then "finished" is false and the exit status 1.

The flags after `--` are speculators' own (`speculators train --help`); run.sh passes
--draft-attn-impl sdpa (flex attention needs a compiler on the CPU) and --loss-implementation eager
(the fused losses are Triton kernels).
"""
import argparse
import json
import logging
import os
import resource
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrics", required=True, help="JSON lines: every metrics record, then a summary")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then speculators train's flags")
    a = ap.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    if not rest:
        print("error: speculators_cpu.py: no speculators train flags after --", file=sys.stderr)
        sys.exit(2)

    import torch
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    # 2. no-op synchronize
    torch.accelerator.synchronize = lambda *args, **kwargs: None

    import speculators.train.cli as cli
    import speculators.train.trainer as tr
    from speculators.train.config import TrainConfig

    # 1. device cpu (and where a resumed run loads its checkpoint to)
    tr.get_local_rank = lambda: "cpu"
    import speculators.train.checkpointer as ck
    ck.get_current_device = lambda: "cpu"
    # 3. autocast cpu (device_type is set in __init__ just before setup_trainer)
    setup_trainer = tr.Trainer.setup_trainer

    trainers = []

    def setup_trainer_cpu(self):
        self.device_type = "cpu"
        trainers.append(self)
        return setup_trainer(self)

    tr.Trainer.setup_trainer = setup_trainer_cpu

    # 4. no epoch past max_steps
    train_epoch = tr.Trainer.train_epoch

    class MaxStepsDone(Exception):
        pass

    def train_epoch_bounded(self, epoch, **kwargs):
        if self.config.max_steps is not None and self.global_step >= self.config.max_steps:
            raise MaxStepsDone()
        return train_epoch(self, epoch, **kwargs)

    tr.Trainer.train_epoch = train_epoch_bounded

    # 5. metrics to a JSON lines file
    t0 = time.time()
    os.makedirs(os.path.dirname(os.path.abspath(a.metrics)), exist_ok=True)
    out = open(a.metrics, "a")
    steps = []  # (global_step, wall) of each training record
    step_ms = []  # the trainer's own step time (fetch to optimizer step) of each logged step

    class Handler(logging.Handler):
        def emit(self, record):
            msg = record.msg
            if not isinstance(msg, dict):
                return
            wall = time.time() - t0
            rec = {"wall_s": round(wall, 3)}
            rec.update(msg)
            if "global_step" in msg and "train" in msg:
                steps.append((msg["global_step"], wall))
                prof = msg.get("profile") or {}
                if "step_ms" in prof:
                    step_ms.append(prof["step_ms"])
            out.write(json.dumps(rec, default=float) + "\n")
            out.flush()

    setup_metric_logger = cli.setup_metric_logger

    def setup_metric_logger_file(*args, **kwargs):
        r = setup_metric_logger(*args, **kwargs)
        logging.getLogger("speculators.metrics").addHandler(Handler())
        return r

    cli.setup_metric_logger = setup_metric_logger_file

    try:
        cli.main(TrainConfig.resolve(rest))
    except MaxStepsDone:
        pass  # the epoch that reached max_steps was saved and validated

    wall = time.time() - t0
    tr_ = trainers[-1] if trainers else None
    done = tr_ is not None and (tr_.config.max_steps is None or tr_.global_step >= tr_.config.max_steps)
    summary = {"summary": True, "finished": done, "global_step": tr_.global_step if tr_ else None,
               "steps": len(steps), "wall_s": round(wall, 3),
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "threads": torch.get_num_threads()}
    if len(steps) >= 2:
        (s0, w0), (s1, w1) = steps[0], steps[-1]
        if s1 > s0:
            summary["s_per_step_wall"] = round((w1 - w0) / (s1 - s0), 4)  # validation and checkpoints included
    if len(step_ms) >= 2:
        summary["s_per_step"] = round(sum(step_ms[1:]) / len(step_ms[1:]) / 1000, 4)  # the first step excluded
    out.write(json.dumps(summary) + "\n")
    out.close()
    print(f"speculators_cpu: {summary}")
    if not done:
        # a signal: speculators saved ckpt/interrupted and returned; a rerun resumes from the last epoch
        print(f"error: speculators_cpu.py: stopped at step {summary['global_step']} of {tr_.config.max_steps if tr_ else '?'}"
              " (interrupted): run again to resume from the last epoch checkpoint", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
