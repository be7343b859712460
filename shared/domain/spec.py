"""The job spec users publish to ``spotline-submit``.

Modelled on Aibro's ``online_fit``: the same names where the meaning is the
same (machine_ids with ``.od`` for on demand, batch_size, epochs, fit_kwargs,
cool_down_period_s, wait_request_s, wait_new_job_create_s...), plus what runs
on the VM (a built-in trainer, or a command with code and data URIs).
"""

from __future__ import annotations

import difflib
import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from spotline.shared.contract.exit_codes import SIGNAL_NUMBERS, code_of_signal
from spotline.shared.domain.bounds import (
    JOB_ID_PATTERN,
    MAX_ATTEMPTS,
    MAX_EPOCHS,
    MAX_PERIOD_S,
    MAX_RUNTIME_S,
    MAX_SPEC_BYTES,
    MAX_URI_CHARS,
    ZONE_PATTERN,
    check_keys,
    json_problem,
)
from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.secret_env import (
    MASK,
    REFERENCE_FORMS,
    SECRET_NAME_WORDS,
    is_secret_name,
)
from spotline.shared.domain.webhooks import ANY_NETWORK, MAX_URL_CHARS, url_problem

# The frameworks whose gangs replace a lost node, their nodes restarting
# their ranks on a regroup (the agent's ``regroup``;
# ``spotline.shared.domain.node_replacement``), each shown on the local
# stack: every framework.
REPLACEABLE_FRAMEWORKS = frozenset({"pytorch", "command", "xgboost", "ray", "jax", "tensorflow"})
# Those whose gangs may also train on at a smaller size (``min_nodes``).
ELASTIC_FRAMEWORKS = frozenset({"pytorch", "command"})

# Names end up in VM names and labels: lowercase letters, digits and hyphens.
NAME_PATTERN = JOB_ID_PATTERN
MACHINE_ID_PATTERN = r"^[a-z0-9][-a-z0-9]*(\.od)?$"
# A container image reference (registry/path:tag@digest): no spaces, and no
# leading "-" that the container runtime would read as an option.
IMAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$"
BUILTIN_TRAINERS = ("digits_mlp", "keras_ffnn", "keras_model")
# The built-in Keras trainers: one process per node drives every GPU
# (tf.distribute.MirroredStrategy). keras_model trains the compiled model and
# arrays that ``spotline.keras.fit`` puts in the job's data folder.
KERAS_TRAINERS = frozenset({"keras_ffnn", "keras_model"})
# More than any machine's GPUs (8), for CPU data-parallel jobs too.
MAX_PROCESSES_PER_NODE = 16

MachineId = Annotated[str, Field(max_length=64)]
ZoneName = Annotated[str, Field(min_length=1, max_length=63, pattern=ZONE_PATTERN)]
Seconds = Annotated[int, Field(ge=0, le=MAX_PERIOD_S)]
EnvVars = Annotated[dict[str, str], AfterValidator(check_keys)]


def _exit_code(value: object) -> object:
    """A signal's name as the code of a death by it (``"SIGABRT"``: 134, as
    the agent reports it); a number as it is. JSON's true is not 1."""
    if isinstance(value, bool):
        raise ValueError("an exit code is a number or a signal name, not true or false")
    if isinstance(value, str) and not value.strip().isdigit():
        return code_of_signal(value)
    return value


# A process's exit status is one byte; 0 is success, never a failure to restart.
# A signal name stands for 128+N (``spotline.shared.contract.exit_codes``).
ExitCode = Annotated[
    int,
    BeforeValidator(_exit_code),
    Field(ge=1, le=255),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": 255},
                {"enum": list(SIGNAL_NUMBERS), "type": "string"},
            ]
        },
        mode="validation",
    ),
]


class JobSpec(BaseModel):
    """One training job, exactly as a user submits it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # `"$schema": "spotline-job.schema.json"` lets an editor check a spec against
    # `spotline schema`; spotline reads past it and keeps nothing of it.
    schema_ref: str | None = Field(
        default=None,
        alias="$schema",
        max_length=2048,
        exclude=True,
        description="The JSON Schema an editor checks this spec against (ignored).",
    )
    job_id: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="Optional id; by default derived from the Pub/Sub message id.",
    )
    user: str = Field(pattern=NAME_PATTERN, description="Owner, for quotas and cooling reuse.")
    description: str = Field(default="", max_length=500)
    machine_ids: list[MachineId] = Field(
        min_length=1,
        max_length=32,
        description="Tried in order; NAME is Spot, NAME.od is on demand.",
    )
    zones: list[ZoneName] = Field(
        default_factory=list, max_length=64, description="Allowed zones; empty: defaults."
    )
    framework: Literal["pytorch", "tensorflow", "xgboost", "jax", "ray", "command"] = Field(
        default="pytorch", description="Which distributed environment multi-node jobs get."
    )
    trainer: str | None = Field(default=None, description=f"Built-in: {BUILTIN_TRAINERS}.")
    command: list[str] | None = Field(
        default=None, min_length=1, description="argv to run instead of a built-in trainer."
    )
    code_uri: str | None = Field(default=None, max_length=MAX_URI_CHARS)
    data_uri: str | None = Field(
        default=None,
        max_length=MAX_URI_CHARS,
        description=(
            "A folder or file (any fsspec URL) copied to the VM before the trainer starts; "
            "its local folder is SPOTLINE_DATA_DIR."
        ),
    )
    image: str | None = Field(
        default=None,
        max_length=MAX_URI_CHARS,
        pattern=IMAGE_PATTERN,
        description=(
            "A container image the command runs in (GPUs passed through); needs 'command'."
        ),
    )
    record: bool = Field(
        default=False,
        description=(
            "Keep a snapshot of code_uri and data_uri under the job's storage "
            "(made by `spotline submit`); `spotline replay` runs the snapshot."
        ),
    )
    snapshot_digest: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description=(
            "The SHA-256 of a recorded snapshot's files, set by `spotline submit` and "
            "`spotline replay`; kept with the job so a rewritten snapshot is refused."
        ),
    )
    batch_size: int = Field(default=32, ge=1, le=10_000_000)
    epochs: int = Field(default=1, ge=1, le=MAX_EPOCHS)
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    fit_kwargs: dict[str, Any] = Field(default_factory=dict)
    validation_split: float = Field(default=0.2, ge=0.0, lt=1.0)
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="NumPy's seeds are 32-bit.")
    nodes: int = Field(
        default=1, ge=1, le=64, description="VMs that train together, created in one zone."
    )
    processes_per_node: int | None = Field(
        default=None,
        ge=1,
        le=MAX_PROCESSES_PER_NODE,
        description=(
            "Trainer processes (ranks) on each node. Default: the machine's GPU count "
            "(1 on a CPU machine) for pytorch and command jobs; 1 for tensorflow, jax, "
            "xgboost, ray and the Keras trainers, whose one process drives every GPU."
        ),
    )
    ray_join_timeout_s: int = Field(
        default=600,
        ge=1,
        le=MAX_PERIOD_S,
        description=(
            "framework ray: how long the head waits for every node to join the Ray "
            "cluster before the job FAILS, naming how many joined."
        ),
    )
    replace_node_timeout_s: int = Field(
        default=300,
        ge=0,
        le=MAX_PERIOD_S,
        description=(
            "Multi-node jobs: when one node is preempted, the others stop at the shared "
            "step, keep their VMs and wait while one VM replaces the lost node in the same "
            "zone. If the gang has not regrouped this many seconds after the loss (no "
            "capacity, a slow boot), the whole gang is relaunched as a new attempt. 0: "
            "always relaunch the whole gang. Every framework's gang regroups (pytorch, "
            "command, xgboost, ray, jax, tensorflow)."
        ),
    )
    min_nodes: int | None = Field(
        default=None,
        ge=1,
        le=63,
        description=(
            "Multi-node jobs, elastic: when one node is preempted, the other nodes, if at "
            "least this many, train on at the smaller size from the saved step while the "
            "replacement boots, and the gang grows back when it joins; each change of size "
            "is a restart from the last save. Below nodes; pytorch and command only. Unset: "
            "the others wait for the replacement. It changes the effective batch size."
        ),
    )
    cool_down_period_s: Seconds = 0
    stop_period_s: int = Field(
        default=0,
        ge=0,
        le=MAX_PERIOD_S,
        description=(
            "On-demand (.od) VMs: once the job (and any cooling period) ends, stop the VM, "
            "keeping its disk, for this long; a later job of the user for the same machine id "
            "restarts it instead of creating one. Within the stopped-instances quota. 0: delete."
        ),
    )
    wait_request_s: int = Field(
        default=600,
        ge=0,
        le=MAX_PERIOD_S,
        description=(
            "Seconds each machine option is asked for (retried while it has no capacity) "
            "before the next one; 0: every option at once."
        ),
    )
    wait_total_s: int | None = Field(
        default=None,
        ge=-MAX_PERIOD_S,
        le=MAX_PERIOD_S,
        description=(
            "Seconds a job waits for capacity in all, then CANCELED; default: wait_request_s "
            "x the number of machine_ids; non-positive: no limit (options asked for in turn)."
        ),
    )
    wait_new_job_create_s: int = Field(
        default=-1, ge=-MAX_PERIOD_S, le=MAX_PERIOD_S, description="Non-positive: no limit."
    )
    wait_new_job_create_interval: int = Field(default=10, ge=1, le=MAX_PERIOD_S)
    max_runtime_s: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RUNTIME_S,
        description="CANCELED when the job has run this long in all.",
    )
    max_attempts: int = Field(
        default=10,
        ge=1,
        le=MAX_ATTEMPTS,
        description=(
            "VMs tried in all (preemptions, stalls and restarts on errors together), "
            "then FAILED: the cap on what a job may burn."
        ),
    )
    # -- the failure policy (spotline.shared.domain.failure_policy) --
    max_restarts_on_errors: int = Field(
        default=0,
        ge=0,
        le=MAX_ATTEMPTS,
        description=(
            "A non-zero exit starts a new attempt from the last checkpoint, this many "
            "times; the next one fails the job. 0: the first non-zero exit fails it."
        ),
    )
    restart_on_exit_codes: list[ExitCode] = Field(
        default_factory=list,
        max_length=32,
        description=(
            "Exit codes that always start a new attempt (a flaky NCCL error), not counted "
            "against max_restarts_on_errors; max_attempts still caps them. A trainer killed "
            "by signal N exits 128+N, as a shell reports it: name it by its number (134) or "
            'by the signal\'s name ("SIGABRT").'
        ),
    )
    max_preemptions: int | None = Field(
        default=None,
        ge=0,
        le=MAX_ATTEMPTS,
        description=(
            "Preemptions recovered from; the next one fails the job. null: no limit "
            "(max_attempts still caps the VMs tried)."
        ),
    )
    avoid_preempted_zone_s: Seconds = Field(
        default=0,
        description=(
            "After a preemption in a zone, placement tries the other allowed zones first for "
            "this long (the zone is still tried last). 0: zones in their usual order."
        ),
    )
    fallback_after_preemptions: int = Field(
        default=0,
        ge=0,
        le=MAX_ATTEMPTS,
        description="After this many preemptions of a Spot machine id, skip it (0: never).",
    )
    on_demand_fallback: bool = Field(
        default=False, description="A skipped Spot machine id is replaced by its .od twin."
    )
    env: EnvVars = Field(
        default_factory=dict,
        description=(
            "Environment variables for the trainer. A name containing "
            f"{', '.join(SECRET_NAME_WORDS)} (any case; TOKEN not followed by a letter) "
            f"takes no literal value, only a Secret Manager reference: {REFERENCE_FORMS}; "
            "the VM resolves it, and only the reference is stored."
        ),
    )

    webhook_url: str | None = Field(
        default=None,
        max_length=MAX_URL_CHARS,
        description=(
            "POSTed each state change of the job (the spotline-job-events JSON); "
            "https only, to a public address."
        ),
    )

    @field_validator("webhook_url")
    @classmethod
    def _webhook(cls, url: str | None) -> str | None:
        # Any network here; the deployment's rules (``webhook_allowed_networks``)
        # are admission's, the addresses the notify function's.
        problem = None if url is None else url_problem(url, ANY_NETWORK)
        if problem is not None:
            raise ValueError(problem)
        return url

    @field_validator("code_uri", "data_uri")
    @classmethod
    def _located(cls, uri: str | None, info: ValidationInfo) -> str | None:
        # A VM's working folder is its own: a relative path names nothing there.
        if uri is not None and "://" not in uri and not uri.startswith("/"):
            upload = "--code-dir" if info.field_name == "code_uri" else "--data-dir"
            raise ValueError(
                f"{info.field_name}: {uri!r} is a relative path, which names nothing on the "
                f"VM; give a gs:// URL, or upload the folder with `spotline submit {upload}` "
                f"(spotline.submit({upload[2:].replace('-', '_')}=...))"
            )
        return uri

    @field_validator("hyperparameters", "fit_kwargs")
    @classmethod
    def _storable(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Free-form JSON, kept in the job document: Firestore must hold it.
        problem = json_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _fits_in_metadata(self) -> JobSpec:
        size = len(self.model_dump_json(exclude_defaults=True))
        if size > MAX_SPEC_BYTES:
            raise ValueError(
                f"the spec is {size} bytes as JSON, over {MAX_SPEC_BYTES}: it travels in the "
                "VM's metadata; keep large inputs in data_uri or code_uri"
            )
        return self

    @field_validator("machine_ids")
    @classmethod
    def _machine_ids(cls, machine_ids: list[str]) -> list[str]:
        # A field's own check: named beside every other field's problem.
        bad = [repr(m) for m in machine_ids if not _matches(MACHINE_ID_PATTERN, m)]
        if bad:
            raise ValueError(f"{', '.join(bad)} is not a machine id (NAME or NAME.od)")
        return machine_ids

    @model_validator(mode="after")
    def _one_entrypoint(self) -> JobSpec:
        problem = entry_point_problem(self.trainer, self.command)
        if problem is not None:
            raise ValueError(problem)
        if self.trainer is not None and self.trainer not in BUILTIN_TRAINERS:
            raise ValueError(f"trainer: {self.trainer!r} is not one of {BUILTIN_TRAINERS}")
        if self.trainer == "keras_model" and self.data_uri is None:
            raise ValueError(
                "data_uri: the keras_model trainer trains the model.keras and data.npz of "
                "the job's data folder; give data_uri (spotline.keras.fit sets it)"
            )
        if self.image is not None and self.command is None:
            raise ValueError(
                "image: a container runs a 'command'; the built-in trainers run in the VM image"
            )
        self._one_process_where_needed()
        self._elastic()
        on_demand = self.on_demand_fallback or any(m.endswith(".od") for m in self.machine_ids)
        if self.stop_period_s > 0 and not on_demand:
            raise ValueError(
                "stop_period_s: only on-demand VMs can be stopped, and no machine id is "
                "on demand (add a NAME.od id, or on_demand_fallback)"
            )
        return self

    def _elastic(self) -> None:
        """``min_nodes``: a gang that trains on at a smaller size while a lost
        node is replaced, so one whose nodes regroup and which replaces them."""
        if self.min_nodes is None:
            return
        if self.min_nodes >= self.nodes:
            raise ValueError(
                f"min_nodes: {self.min_nodes} is not below nodes ({self.nodes}); set it "
                "between 1 and nodes - 1, or leave it unset for a gang that always trains "
                "at its full size"
            )
        if self.framework not in ELASTIC_FRAMEWORKS:
            raise ValueError(
                f"min_nodes: a {self.framework} gang cannot change its size (only "
                f"{' and '.join(sorted(ELASTIC_FRAMEWORKS))} gangs do); leave it unset"
            )
        if self.replace_node_timeout_s == 0:
            raise ValueError(
                "min_nodes: replace_node_timeout_s is 0, so a lost node is never replaced "
                "and the gang could not grow back; give replace_node_timeout_s a bound, or "
                "leave min_nodes unset"
            )

    def _one_process_where_needed(self) -> None:
        """Jobs whose one process per node drives every GPU itself; a second
        process would train a second copy beside it."""
        if (self.processes_per_node or 1) == 1:
            return
        if self.image is not None:
            raise ValueError(
                "processes_per_node: a container job runs one process per node; start the "
                "ranks inside the image (torchrun --nproc-per-node)"
            )
        if self.trainer in KERAS_TRAINERS:
            raise ValueError(
                f"processes_per_node: the {self.trainer} trainer runs one process per node, "
                "which trains on every GPU with tf.distribute.MirroredStrategy; leave it unset"
            )
        if self.framework == "xgboost":
            raise ValueError(
                "processes_per_node: xgboost's tracker takes one worker per node; leave it unset"
            )
        if self.framework == "ray":
            raise ValueError(
                "processes_per_node: a Ray node runs one launcher, and Ray starts its own "
                "workers on it; leave it unset"
            )

    # The OS can start no process with these (execve takes NUL-terminated
    # strings, and "NAME=value" pairs): refused here, not on the VM.
    @field_validator("command")
    @classmethod
    def _no_nul_in_command(cls, command: list[str] | None) -> list[str] | None:
        for arg in command or []:
            if "\0" in arg:
                raise ValueError(f"argument {arg!r:.60} holds a NUL byte")
        return command

    @field_validator("env")
    @classmethod
    def _env_the_os_takes(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if "=" in name or "\0" in name:
                raise ValueError(f"variable name {name!r:.60} holds '=' or a NUL byte")
            if "\0" in value:
                raise ValueError(f"variable {name!r:.60} has a NUL byte in its value")
        return env


def _matches(pattern: str, value: str) -> bool:
    import re

    return re.fullmatch(pattern.strip("^$"), value) is not None


def too_many_nodes(spec: JobSpec, max_active_instances: int) -> str | None:
    """Why the job can never run (it needs more VMs at once than its user may
    hold), or None."""
    if spec.nodes > max_active_instances:
        return (
            f"nodes: {spec.nodes} VMs is over the active-instances quota of {max_active_instances}"
        )
    return None


def parse_spec(payload: bytes) -> JobSpec:
    """Parse a submitted message, naming what is wrong when it is not a job spec.

    Raises:
        InvalidMessage: too large, not UTF-8 JSON (or nested too deep, or with
            a number Python will not read), not an object, or a field is
            missing, of the wrong type or out of bounds; the message lists
            every offending field.
    """
    if len(payload) > MAX_SPEC_BYTES:
        raise InvalidMessage(f"the message is {len(payload)} bytes, over {MAX_SPEC_BYTES}")
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        # ValueError: JSONDecodeError, and integers over Python's 4300 digits.
        raise InvalidMessage(f"the message is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise InvalidMessage(f"the message must be a JSON object, not {type(data).__name__}")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as err:
        said = describe_validation_error(err)
        # The spec's own checks run once its fields are valid; this one is
        # read from the message, so that it is named beside a field's problem.
        also = entry_point_problem(data.get("trainer"), data.get("command"))
        if also is not None and also not in said:
            said = f"{said}; {also}"
        raise InvalidMessage(said) from err


def entry_point_problem(trainer: object, command: object) -> str | None:
    """Why a spec does not name exactly one thing to run, or None."""
    if (trainer is None) == (command is None):
        return "give exactly one of 'trainer' (built-in) or 'command'"
    return None


_PROBLEMS_NAMED = 10
# A spec file's local folders, which only the CLI and the API upload and take
# out of the message (infra/client/submission.py).
_LOCAL_FOLDERS = {"code_dir": "code_uri", "data_dir": "data_uri"}


def describe_validation_error(err: ValidationError) -> str:
    """One line per problem: 'field.path: what is wrong (got value)'; the first
    ten, so that the reason (kept in a document) stays short."""
    lines = []
    problems = err.errors(include_url=False)
    for problem in problems[:_PROBLEMS_NAMED]:
        where = ".".join(str(part)[:60] for part in problem["loc"]) or "message"
        if problem["type"] == "extra_forbidden" and len(problem["loc"]) == 1:
            lines.append(f"{where}: {_not_a_field(str(problem['loc'][0]))}")
            continue
        shown = _masked_input(problem["loc"], problem.get("input"))
        got = "" if problem["type"] == "missing" else f" (got {_short(shown)})"
        lines.append(f"{where}: {problem['msg'][:300]}{got}")
    if len(problems) > _PROBLEMS_NAMED:
        lines.append(f"and {len(problems) - _PROBLEMS_NAMED} more problems")
    return "; ".join(lines)


def _not_a_field(name: str) -> str:
    """What to say of a key the spec does not have: the field it most likely
    meant, when one is close (``epoch`` for ``epochs``)."""
    if name in _LOCAL_FOLDERS:
        return (
            "a folder on the submitting machine, which no VM can read: submit the spec "
            f"with `spotline submit FILE` (or spotline.submit), which uploads it and sets "
            f"{_LOCAL_FOLDERS[name]}, or give {_LOCAL_FOLDERS[name]} yourself"
        )
    fields = [field.alias or key for key, field in JobSpec.model_fields.items()]
    close = difflib.get_close_matches(name, fields, n=1, cutoff=0.75)
    if close:
        return f"not a field of the job spec; did you mean {close[0]!r}?"
    return "not a field of the job spec (`spotline schema` lists them)"


def _masked_input(loc: tuple[int | str, ...], value: object) -> object:
    """What a problem may show of its input: never a secret-like variable's
    value (the reason is kept in Firestore and logged; see secret_env)."""
    if len(loc) > 1 and loc[0] == "env":
        return MASK if is_secret_name(str(loc[1])) else value
    if loc == ("env",) and isinstance(value, dict):
        return _masked_dict(value)
    if not loc and isinstance(value, dict) and isinstance(value.get("env"), dict):
        return {**value, "env": _masked_dict(value["env"])}
    return value


def _masked_dict(env: dict[Any, Any]) -> dict[Any, Any]:
    return {name: MASK if is_secret_name(str(name)) else item for name, item in env.items()}


def _short(value: object) -> str:
    """The start of ``value``'s repr, without building all of a huge one."""
    if isinstance(value, str | bytes) and len(value) > 60:
        value = value[:60]
    elif isinstance(value, dict | list) and len(value) > 3:
        return f"a {type(value).__name__} of {len(value)} items"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # over 4300 digits, or nested too deep
        return "a value too large to show"
    return f"{text:.60}"
