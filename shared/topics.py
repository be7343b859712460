"""The Pub/Sub topic of each event: fixed names, which the topology declares
and deploy creates (a light module: the CLI imports it on every command)."""

TOPICS = {
    "submit": "spotline-submit",
    "cancel": "spotline-cancel",
    "vm_booted": "spotline-vm-booted",
    "epoch_done": "spotline-epoch-done",
    "job_finished": "spotline-job-finished",
    "spot_preempted": "spotline-spot-preempted",
    "reaper_tick": "spotline-reaper-tick",
    "dead_letter": "spotline-dead-letter",
}
