"""A container's name is one docker accepts for every job id the spec
accepts, and another for each attempt and regroup generation."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from spotline.shared.domain.bounds import JOB_ID_PATTERN
from spotline.vm_image.agent.container import container_name

# docker's rule for container names (daemon/names: RestrictedNamePattern).
DOCKER_NAME = r"[a-zA-Z0-9][a-zA-Z0-9_.-]+"


@given(
    st.from_regex(JOB_ID_PATTERN, fullmatch=True),
    st.integers(min_value=1, max_value=10_000),
    st.integers(min_value=0, max_value=10_000),
)
def test_every_job_id_makes_a_name_docker_accepts(
    job_id: str, attempt: int, generation: int
) -> None:
    assert re.fullmatch(DOCKER_NAME, container_name(job_id, attempt, generation))


def test_a_regroup_makes_another_name() -> None:
    names = {container_name("j1", 1, 0), container_name("j1", 1, 1), container_name("j1", 2, 0)}
    assert len(names) == 3
