#!/bin/bash
# Runs once, at image build time, as root (Packer's shell provisioner).
set -euxo pipefail

# 1. The NVIDIA driver: the Deep Learning VM installs it on first boot when
#    asked (install-nvidia-driver=True); wait for it so that it is baked in.
for _ in $(seq 1 60); do
  nvidia-smi && break
  sleep 10
done
nvidia-smi

# 2. The agent, in its own virtual environment, with the extras of both
#    built-in trainers for a GPU: torch for digits_mlp (PyPI's Linux wheel
#    carries CUDA), tensorflow-cuda for keras_ffnn.
#    spotline needs Python >= 3.11; the Deep Learning VM's own is 3.10.
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y python3.11 python3.11-venv
python3.11 -m venv /opt/spotline/venv
/opt/spotline/venv/bin/pip install --upgrade pip
/opt/spotline/venv/bin/pip install "$(ls /tmp/spotline-*.whl)[torch,tensorflow-cuda,ray]"
#    gs:// goes through gcsfs (a base dependency): fail the build, not the
#    first checkpoint upload, if it is missing.
/opt/spotline/venv/bin/python -c "import fsspec; fsspec.get_filesystem_class('gs')"

# 3. Static startup and shutdown scripts (no user string is ever pasted in).
install -d /opt/spotline/scripts
install -m 0755 /tmp/spotline-scripts/startup.sh /tmp/spotline-scripts/shutdown.sh /opt/spotline/scripts/

# 4. The trainer's account (vm_image/agent/privileges.py): the agent runs as
#    root, the user's code as spotline-trainer, a system account with no
#    login shell, no password, no sudo and no home of its own (the agent gives
#    it one per job, removed before the next). It is in the groups that own
#    the GPU devices: video (/dev/nvidia* on the Deep Learning VM, where they
#    may also be open to all) and render (/dev/dri/renderD*); the build fails
#    if CUDA's nvidia-smi cannot run as it.
getent group render >/dev/null || groupadd --system render
id -u spotline-trainer >/dev/null 2>&1 || useradd --system --user-group \
  --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin spotline-trainer
usermod --append --groups video,render spotline-trainer
passwd --lock spotline-trainer
if grep -rqs spotline-trainer /etc/sudoers /etc/sudoers.d; then
  echo "spotline-trainer must have no sudo rule" >&2
  exit 1
fi
ls -l /dev/nvidia* || true
runuser -u spotline-trainer -- nvidia-smi
runuser -u spotline-trainer -- /opt/spotline/venv/bin/python -c "import spotline.vm_image.trainers"

# 5. The service: enabled, so it starts on every boot of a VM from this image.
#    Job folders live in /var/lib/spotline/jobs, each the trainer's, 0700.
install -d -m 0755 /var/lib/spotline
install -m 0644 /tmp/spotline-agent.service /etc/systemd/system/spotline-agent.service
systemctl daemon-reload
systemctl enable spotline-agent.service

# 6. Logs: the Ops Agent (Google's installer, pinned to major version 2)
#    sends the agent's JSON lines to Cloud Logging as structured entries, so
#    `spotline logs` and each attempt's query (jsonPayload.job_id=...) find
#    them after the VM is gone; logrotate keeps the file bounded.
install -d -m 0755 /var/log/spotline
curl -sSfO https://dl.google.com/cloudagents/add-google-cloud-ops-agent-repo.sh
bash add-google-cloud-ops-agent-repo.sh --also-install --version=2.*.*
rm add-google-cloud-ops-agent-repo.sh
install -m 0644 /tmp/spotline-ops-agent/config.yaml /etc/google-cloud-ops-agent/config.yaml
install -m 0644 /tmp/spotline-ops-agent/logrotate.conf /etc/logrotate.d/spotline-agent
systemctl enable google-cloud-ops-agent
