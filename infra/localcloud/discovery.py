"""Requests held to Google's published API definitions: the discovery documents
that ``google-api-python-client`` ships (``googleapiclient/discovery_cache/
documents/<api>.<version>.json``), read where it is installed, never copied here.

A ``Contract`` names the APIs a local server stands in for. ``check(request)``
finds the method by HTTP method and path, then checks the query parameters
(known, typed, required, path patterns) and the JSON body, recursively, against
the method's request schema: unknown fields, wrong types, bad enum values. A
refusal is Compute Engine's (Google's front end's) own 400 body, its wording
copied from real answers, e.g. ``Invalid JSON payload received. Unknown name
"x" at 'instance.scheduling': Cannot find field.``

Every refusal is also kept in ``violations`` so a test run can fail on any
request that the doubles refused, even one whose error the caller swallowed.

Without ``google-api-python-client`` (a user's install that left out the dev
extras) nothing is checked: ``check`` lets every request through and logs once
that it does so.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import util
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from spotline.infra.localcloud.schema_check import (
    Refusal,
    body_problem,
    scalar_problem,
    snake,
)

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
# Google's system parameters, accepted by every API whether or not its document
# lists them (https://cloud.google.com/apis/docs/system-parameters); the client
# libraries' REST transports send ``$alt=json;enum-encoding=int``.
SYSTEM_PARAMETERS = frozenset(
    {"$alt", "$callback", "$fields", "$prettyPrint", "$outputDefaults", "$userProject"}
    | {"alt", "fields", "key", "prettyPrint", "quotaUser", "userProject", "$.xgafv"}
    | {"access_token", "oauth_token", "callback", "uploadType", "upload_protocol", "userIp"}
)


class DiscoveryMissing(Exception):
    """``google-api-python-client`` is not installed."""


@dataclass(frozen=True)
class Violation:
    """A request that does not fit its API's published definition."""

    api: str
    method: str
    path: str
    message: str


_violations: list[Violation] = []
_violations_lock = threading.Lock()


def violations() -> list[Violation]:
    """Every violation any contract has refused in this process, in order."""
    with _violations_lock:
        return list(_violations)


def clear_violations() -> list[Violation]:
    """Forget (and answer) the violations seen so far."""
    with _violations_lock:
        seen = list(_violations)
        _violations.clear()
        return seen


def documents_folder() -> Path:
    """Where the installed ``googleapiclient`` keeps its discovery documents.

    Raises:
        DiscoveryMissing: it is not installed.
    """
    try:
        found = util.find_spec("googleapiclient")
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        raise DiscoveryMissing(
            "google-api-python-client is not installed: pip install google-api-python-client"
        )
    return Path(next(iter(found.submodule_search_locations))) / "discovery_cache" / "documents"


@cache
def document(api: str, version: str) -> JsonDict:
    """The discovery document of ``api`` ``version`` (``compute``, ``v1``).

    Raises:
        DiscoveryMissing: google-api-python-client is not installed.
    """
    loaded: JsonDict = json.loads((documents_folder() / f"{api}.{version}.json").read_text())
    return loaded


@dataclass(frozen=True)
class Method:
    """One method of a discovery document, with the regex its path makes."""

    api: str
    id: str
    http_method: str
    pattern: re.Pattern[str]
    literal: int  # characters of the template outside parameters: more is more specific
    spec: JsonDict
    document: JsonDict


def _methods(resource: JsonDict) -> Iterable[JsonDict]:
    yield from (resource.get("methods") or {}).values()
    for child in (resource.get("resources") or {}).values():
        yield from _methods(child)


@cache
def methods(api: str, version: str) -> tuple[Method, ...]:
    """Every method of the document, its path template made a regex over the
    request's (still percent-encoded) path."""
    doc = document(api, version)
    found = []
    for spec in _methods(doc):
        template = "/" + str(doc.get("servicePath") or "") + spec["path"]
        pattern, literal = "", 0
        for piece in re.split(r"(\{\+?[^}]+\})", template):
            if piece.startswith("{+"):
                pattern += f"(?P<{_group(piece[2:-1])}>.+?)"
            elif piece.startswith("{"):
                pattern += f"(?P<{_group(piece[1:-1])}>[^/]+?)"
            else:
                pattern += re.escape(piece)
                literal += len(piece)
        found.append(
            Method(
                api=f"{api}.{version}",
                id=spec["id"],
                http_method=spec["httpMethod"],
                pattern=re.compile(f"^{pattern}$"),
                literal=literal,
                spec=spec,
                document=doc,
            )
        )
    return tuple(found)


def _group(name: str) -> str:
    return "p_" + re.sub(r"\W", "_", name)


def _path_parameters(method: Method, match: re.Match[str]) -> dict[str, str]:
    return {
        name: unquote(match[_group(name)])
        for name, parameter in (method.spec.get("parameters") or {}).items()
        if parameter.get("location") == "path" and _group(name) in match.groupdict()
    }


def under_an_api(apis: Iterable[tuple[str, str]], path: str) -> bool:
    """Whether ``path`` starts as some method of ``apis`` starts (``/compute/``
    for Compute Engine, ``/v1/`` for IAM): a wrong path there is a caller's
    mistake; one elsewhere (``/``, ``/favicon.ico``) was never an API call."""
    first = path.lstrip("/").split("/", 1)[0]
    return bool(first) and any(
        method.pattern.pattern.startswith(f"^/{re.escape(first)}/")
        for api, version in apis
        for method in methods(api, version)
    )


def find_method(apis: Iterable[tuple[str, str]], http_method: str, path: str) -> list[Method]:
    """The methods whose HTTP method and path template fit, the most specific
    first; a ``{+name}`` parameter must fit its pattern to count."""
    fitting = []
    for api, version in apis:
        for method in methods(api, version):
            match = method.pattern.match(path)
            if method.http_method != http_method or match is None:
                continue
            parameters = method.spec.get("parameters") or {}
            reserved = re.findall(r"\{\+([^}]+)\}", method.spec["path"])
            values = _path_parameters(method, match)
            if all(
                re.search(parameters[name].get("pattern") or ".", values.get(name, ""))
                for name in reserved
                if name in parameters
            ):
                fitting.append(method)
    return sorted(fitting, key=lambda m: -m.literal)


def check(
    method: Method, path: str, query: Mapping[str, str], body: Any, has_body: bool
) -> Refusal | None:
    """The first way the request breaks ``method``'s definition, or None."""
    match = method.pattern.match(path)
    assert match is not None
    parameters: JsonDict = method.spec.get("parameters") or {}
    compute = method.api.startswith("compute.")
    for name, value in _path_parameters(method, match).items():
        wanted = parameters[name].get("pattern")
        if compute and wanted and re.fullmatch(wanted, value) is None:
            return Refusal(
                400,
                f"Invalid value for field '{name}': '{value}'. Must be a match of regex '{wanted}'",
            )
    known = {**(method.document.get("parameters") or {}), **parameters}
    for name, value in query.items():
        spec = known.get(name)
        if spec is None:
            if name in SYSTEM_PARAMETERS:
                continue
            return Refusal(
                400,
                f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query '
                f"parameter. Field '{name}' could not be found in request message.",
                name,
            )
        if spec.get("location") == "path":
            continue
        problem = scalar_problem(spec, value, query_value=True)
        if problem is not None:
            return Refusal(400, f"Invalid value at '{snake(name)}' ({problem}), \"{value}\"", name)
    for name, spec in parameters.items():
        if spec.get("required") and spec.get("location") == "query" and name not in query:
            return Refusal(400, f"Required parameter '{name}' is missing.", name)
    request = method.spec.get("request")
    if not has_body:
        return None
    if request is None:
        if isinstance(body, dict) and body:
            name = next(iter(body))
            return Refusal(
                400,
                f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.',
                name,
            )
        return None
    if body is None:
        return None  # not JSON (an upload): the media is not the schema's
    schemas: JsonDict = method.document.get("schemas") or {}
    return body_problem(schemas, request["$ref"], body, compute)


class Contract:
    """The APIs one local server stands in for, and the paths it serves that
    are no Google API (``ignore``: path prefixes).

    Args:
        apis: ``(api, version)`` pairs, e.g. ``[("compute", "v1")]``.
        ignore: path prefixes served that are not Google's (a signed upload URL,
            the local cloud's chaos routes).
    """

    def __init__(self, apis: Iterable[tuple[str, str]], ignore: Iterable[str] = ()) -> None:
        self.apis = tuple(apis)
        self.ignore = tuple(ignore)
        self._warned = False

    def refusal(
        self, http_method: str, path: str, query: Mapping[str, str], body: Any, has_body: bool
    ) -> tuple[str, Refusal] | None:
        """``(method id, refusal)`` for a request that breaks the definition, or
        None; a path no method of the APIs serves is refused 404."""
        if path.startswith(self.ignore):
            return None
        try:
            fitting = find_method(self.apis, http_method, path)
        except DiscoveryMissing as missing:
            if not self._warned:
                self._warned = True
                log.warning("requests are not checked against Google's definitions: %s", missing)
            return None
        if not fitting:
            names = ", ".join(f"{a}.{v}" for a, v in self.apis)
            return "", Refusal(404, f"No method of {names} serves {http_method} {path}")
        first: tuple[str, Refusal] | None = None
        for method in fitting:
            problem = check(method, path, query, body, has_body)
            if problem is None:
                return None
            first = first or (method.id, problem)
        return first

    def record(
        self, http_method: str, path: str, query: Mapping[str, str], body: Any, has_body: bool
    ) -> Refusal | None:
        """``refusal``, kept in ``violations`` when there is one."""
        found = self.refusal(http_method, path, query, body, has_body)
        if found is None:
            return None
        method_id, refusal = found
        if not method_id and not under_an_api(self.apis, path):
            return refusal  # a stray probe of the port (GET /): not a request of an API's
        api = method_id.split(".", 1)[0] if method_id else ",".join(a for a, _ in self.apis)
        with _violations_lock:
            _violations.append(Violation(api, http_method, path, refusal.message))
        return refusal
