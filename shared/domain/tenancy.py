"""What keeps one user's jobs apart from another's in the per-user mode
(``Settings.user_topics``; SECURITY.md, Deploy-side isolation): the service
account their VMs run as, the folder of the bucket that account may touch, the
Secret Manager names it may read, and the network their VMs join.

Pure, and shared by the three sides that must agree on it: ``spotline deploy``
makes the accounts and grants them (``spotline.infra.deploy.iam``), placement
starts each job's VMs as its user's account, and submission refuses a secret
outside the user's names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from spotline.shared.domain.secret_env import is_reference, parse_reference

# A user's VM account id: IAM takes 6-30 of a-z, 0-9 and "-", starting with a
# letter. The user's name is cut to fit, and a digest of the whole name keeps
# two users whose names share the cut part apart; the same user always gets
# the same id, so a deploy run again finds the account it made.
_ACCOUNT_PREFIX = "slvm-"
_ACCOUNT_NAME_CHARS = 16
_DIGEST_CHARS = 8
# A user's secrets: ``spotline-u-USER_NAME``. A user name holds no "_", so no
# user's prefix starts another's (``alice`` vs ``alice-x``).
_SECRET_PREFIX = "spotline-u-"
# The VPC network ``spotline deploy`` makes for the VMs (the default network's
# allow-internal rule lets any VM reach any other).
NETWORK = "spotline"


def vm_account_id(user: str) -> str:
    """The account id of ``user``'s VMs, e.g. ``slvm-alice-2bd806c9``."""
    digest = hashlib.sha256(user.encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{_ACCOUNT_PREFIX}{user[:_ACCOUNT_NAME_CHARS]}-{digest}"


def vm_account_email(user: str, project: str) -> str:
    return f"{vm_account_id(user)}@{project}.iam.gserviceaccount.com"


def vm_account(user: str, project: str, users: tuple[str, ...], shared: str | None) -> str | None:
    """The account a job of ``user`` runs its VMs as: the user's own in the
    per-user mode (``user`` one of ``users``), else the shared one. ``user`` is
    the job's user, which submission checked against the topic it came on:
    never a field of the spec that names an account."""
    return vm_account_email(user, project) if user in users else shared


def secret_prefix(user: str) -> str:
    """The names of the Secret Manager secrets ``user``'s jobs may read."""
    return f"{_SECRET_PREFIX}{user}_"


def user_prefix(user: str) -> str:
    """The folder of the storage root that holds ``user``'s jobs (per-user mode)."""
    return f"users/{user}"


def secret_refusals(env: Mapping[str, str], user: str, project: str) -> list[str]:
    """Why a job of ``user`` may not read the secrets its ``env`` names, one line
    per variable (the per-user mode): each must be a secret of the job's
    project named ``spotline-u-USER_...``, the names the user's VM account
    may read and no other user's may."""
    prefix = secret_prefix(user)
    problems = []
    for name, value in env.items():
        if not is_reference(value):
            continue
        try:
            ref = parse_reference(value)
        except ValueError:
            continue  # env_refusals says what is wrong with it
        if ref.project not in (None, project) or not ref.secret.startswith(prefix):
            problems.append(
                f"env.{name}: {value} is not one of {user}'s secrets: a job may read only "
                f"secrets of project {project} whose name starts with {prefix} "
                f"(e.g. sm://{prefix}{name}); create it there, or ask who holds the other "
                "secret to put its value in one of yours"
            )
    return problems
