"""The local system's commands: ``up``, ``demo``, and ``preempt`` (chaos)."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import sys
import threading

from spotline.infra.cli.exit_codes import Exit
from spotline.infra.client.connection import connect


def up(args: argparse.Namespace) -> int:
    from spotline.infra.localstack.stack import LocalStack, StackOptions
    from spotline.shared.settings import load

    options = StackOptions(
        tick_s=args.tick_s,
        heartbeat_s=args.heartbeat_s,
        preempt_rate_per_vm_hour=args.preempt_rate,
        chaos_seed=args.chaos_seed,
        notice_s=args.notice_s,
        quota_limits=dict(args.quota),
        user_topics=load(
            {}, config_file=False, flags={"user_topics": args.user_topics}
        ).settings.user_topics,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalStack(args.workdir, options) as stack:
        print(f"spotline is up in {stack.timings['ready_s']:.1f} s; workdir {stack.workdir}")
        for name, value in stack.client_env().items():
            print(f"export {name}={value}")
        print("Ctrl-C to stop.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


def demo(args: argparse.Namespace) -> int:
    from spotline.infra.cli.demo import run_demo

    workdir = args.workdir / "demo"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return run_demo(workdir, args.spec, args.timeout_s, args.preempt_after_epoch)


def preempt(args: argparse.Namespace) -> int:
    from spotline.infra.localcloud.chaos_client import ChaosClient, ChaosError
    from spotline.shared.domain.states import JobStatus

    conn = connect(args.workdir)
    settings = conn.settings
    if not settings.compute_endpoint:
        print(
            "preempt is a local chaos tool; on Compute Engine use "
            "`gcloud compute instances simulate-maintenance-event VM --zone Z`",
            file=sys.stderr,
        )
        return Exit.USAGE
    store = conn.store
    job = store.get_job(args.target)
    if job is not None and job.status in JobStatus.terminal():
        print(
            f"job {job.job_id} has ended ({job.status}): it has no VM to preempt",
            file=sys.stderr,
        )
        return Exit.FAILED
    name = job.instance if job is not None else args.target
    if job is not None and args.node:
        if args.node >= len(job.nodes):
            print(f"job {job.job_id} has no node {args.node} now", file=sys.stderr)
            return Exit.FAILED
        name = job.nodes[args.node]
    instance = store.get_instance(name or "")
    if instance is None:
        print(f"no job or VM named {args.target} (or it has no VM now)", file=sys.stderr)
        return Exit.FAILED
    compute = ChaosClient(settings.compute_endpoint, settings.project)
    try:
        if args.hang:
            compute.freeze(instance.zone, instance.name)
            print(f"froze {instance.name}: no more heartbeats")
        elif args.no_notice:
            compute.kill(instance.zone, instance.name)
            print(f"killed {instance.name} with no notice")
        else:
            compute.preempt(instance.zone, instance.name, args.notice_s)
            print(f"preempting {instance.name} with a {args.notice_s:g} s notice")
    except ChaosError as err:  # the VM went meanwhile (its job ended, or the reaper)
        print(f"{instance.name} cannot be preempted: {err}", file=sys.stderr)
        return Exit.FAILED
    return 0
