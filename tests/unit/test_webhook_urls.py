"""A job's webhook: which URLs and addresses are refused (SSRF), and why; the
posting itself is in ``tests/emulators/test_webhook.py``."""

from __future__ import annotations

import json

import pytest

from spotline.shared.domain.admission import refusals
from spotline.shared.domain.catalog import load_catalog
from spotline.shared.domain.errors import InvalidMessage
from spotline.shared.domain.spec import parse_spec
from spotline.shared.domain.webhooks import address_problem, url_problem
from tests.conftest import SPEC

LOCAL = ("127.0.0.0/8",)


@pytest.mark.parametrize(
    ("url", "networks", "said"),
    [
        ("ftp://example.com/hook", (), "must start with https://"),
        ("http://example.com/hook", (), "plain http"),
        ("https://user:pw@example.com/hook", (), "user name or password"),
        ("https://metadata.google.internal/computeMetadata/v1/", LOCAL, "metadata server"),
        ("https://METADATA./x", LOCAL, "metadata server"),
        ("https://169.254.169.254/x", ("169.254.0.0/16",), "metadata server"),
        ("https://[::ffff:169.254.169.254]/x", LOCAL, "metadata server"),
        ("https://10.1.2.3/hook", (), "private, loopback"),
        ("https://127.0.0.1:8080/hook", (), "private, loopback"),
        ("https://[::1]/hook", (), "private, loopback"),
        ("https://[::ffff:192.168.0.1]/hook", (), "private, loopback"),
        ("http://10.0.0.5/hook", LOCAL, "not in webhook_allowed_networks"),
        ("https:///hook", (), "names no host"),
        ("https://example.com:99999/hook", (), "is not a URL"),
    ],
)
def test_a_refused_webhook_url_says_why(url: str, networks: tuple[str, ...], said: str) -> None:
    problem = url_problem(url, networks)
    assert problem is not None and said in problem


@pytest.mark.parametrize(
    ("url", "networks"),
    [
        ("https://hooks.example.com/spotline?x=1", ()),
        ("https://8.8.8.8/hook", ()),
        ("http://127.0.0.1:8080/hook", LOCAL),
        ("https://127.0.0.1/hook", LOCAL),
    ],
)
def test_an_allowed_webhook_url_passes(url: str, networks: tuple[str, ...]) -> None:
    assert url_problem(url, networks) is None


def test_a_private_address_a_name_resolves_to_is_refused_unless_allowed() -> None:
    assert address_problem("192.168.1.7") is not None
    assert address_problem("100.64.0.1") is not None  # shared address space
    assert address_problem("192.168.1.7", ("192.168.0.0/16",)) is None
    assert address_problem("93.184.216.34") is None
    assert address_problem("93.184.216.34", LOCAL, plain_http=True) is not None


# Each IPv6 form that carries an IPv4 address, with 127.0.0.1, 10.0.0.1 and
# the metadata server in it: Python's is_global passes several of them.
EMBEDDED = {
    "127.0.0.1": ["64:ff9b::7f00:1", "64:ff9b:1::7f00:1", "2002:7f00:1::1",
                  "::ffff:127.0.0.1", "::127.0.0.1", "2001:0:7f00:1::1"],
    "10.0.0.1": ["64:ff9b::a00:1", "64:ff9b:1::a00:1", "2002:a00:1::1",
                 "::ffff:10.0.0.1", "::10.0.0.1", "2001:0:a00:1::1"],
    "169.254.169.254": ["64:ff9b::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe", "2002:a9fe:a9fe::1",
                        "::ffff:169.254.169.254", "::169.254.169.254",
                        "2001:0:a9fe:a9fe::1"],
}  # fmt: skip


@pytest.mark.parametrize(
    ("inner", "address"), [(inner, a) for inner, forms in EMBEDDED.items() for a in forms]
)
def test_an_ipv6_form_carrying_a_refused_ipv4_address_is_refused(inner: str, address: str) -> None:
    problem = address_problem(address)
    assert problem is not None and inner in problem, problem
    assert url_problem(f"https://[{address}]/hook") is not None


def test_the_ipv6_forms_of_a_public_ipv4_address_pass() -> None:
    for address in ("64:ff9b::5db8:d822", "::ffff:93.184.216.34"):
        assert address_problem(address) is None, address


def test_the_spec_refuses_a_metadata_webhook_and_admission_a_private_one() -> None:
    with pytest.raises(InvalidMessage, match="metadata server"):
        parse_spec(json.dumps({**SPEC, "webhook_url": "http://169.254.169.254/"}).encode())
    spec = parse_spec(json.dumps({**SPEC, "webhook_url": "http://127.0.0.1:9/h"}).encode())
    [refused] = refusals(spec, load_catalog(), "us-central1")
    assert "plain http" in refused
    assert refusals(spec, load_catalog(), "us-central1", LOCAL) == []
