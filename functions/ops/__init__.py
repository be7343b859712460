"""Orchestration: one module per thing managed, each step re-entrant.

Every function takes the process's ``Deps`` first and reaches for nothing
else; none imports a handler. The arrows point down only::

    sweep       the reaper's four stages: load, decide (pure), apply each action
       |
    recovery    a lost VM: close the attempt, start the next one
       |
    jobs        settle, cancel, admit and start, retries from the queue
       |
    placement   VMs for an attempt: adopted, reused, new, gang
       |     \\
    reuse      |        claim a cooling VM, restart a stopped one; instance slots
       |     queue      wait for capacity or quota, give up
    teardown            let a VM go (delete, stop, end cooling)
       |
    slots       the user's job, active-instance and stopped-instance slots

The decisions they act on are pure functions in ``spotline.shared.domain``.
"""
