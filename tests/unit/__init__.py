"""Unit tests: no emulator, no local stack, no ML framework, no seconds of
waiting (`make test-fast`)."""
