#!/bin/bash
# The instance's shutdown script. On a Spot preemption Compute Engine runs it
# within the 30 s notice; the notice module tells spotline in case the agent is
# gone, and does nothing on an ordinary shutdown. A shutdown must never wait on
# it, so it is killed after 20 s and this script always succeeds.
set -u
timeout 20 /opt/spotline/venv/bin/python -m spotline.vm_image.agent.shutdown_notice 2>&1 \
  | logger -t spotline-shutdown
logger -t spotline-shutdown "shutdown notice exited with status ${PIPESTATUS[0]}"
exit 0
