#!/bin/bash
# The instance's startup script: the image enables the agent's unit, and this
# starts it in case it is not running (a no-op when it is).
set -u
if systemctl start spotline-agent.service; then
  logger -t spotline-startup "spotline-agent.service started"
else
  logger -t spotline-startup "could not start spotline-agent.service (status $?)"
fi
exit 0
