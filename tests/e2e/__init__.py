"""End-to-end tests: the whole local stack, VMs as processes."""
