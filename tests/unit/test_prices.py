"""The catalog's prices: every GPU family priced from its parts, and
``spotline machines --refresh-prices`` through google-cloud-billing's REST
client against a local double of the Billing Catalog API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotline.infra.cli.commands import main as cli
from spotline.infra.localcloud.wire import ApiError, HttpService
from spotline.shared.domain.capacity import SPOT_GPU_METRICS
from spotline.shared.domain.catalog import gpu_zones, load_catalog, priced, shapes, shipped_prices
from spotline.shared.domain.prices import PriceBook, needed
from spotline.shared.domain.sku_prices import PriceError, SkuRate, part_of, rates
from tests.billing_double import SERVICE_PATH, BillingCatalogApi, skus_for

pytest.importorskip("google.cloud.billing_v1", reason="the prices extra: google-cloud-billing")


def test_the_catalog_covers_every_gpu_family_with_zones_and_quota_metrics() -> None:
    catalog = load_catalog()
    gpus = {m.gpu_type for m in catalog.values() if m.gpu_type}
    assert gpus == {
        "nvidia-tesla-t4",
        "nvidia-l4",
        "nvidia-tesla-a100",
        "nvidia-a100-80gb",
        "nvidia-h100-80gb",
        "nvidia-tesla-v100",
        "nvidia-tesla-p100",
    }
    assert gpus <= set(SPOT_GPU_METRICS) and gpus == set(gpu_zones())
    families = {m.machine_type.split("-")[0] for m in catalog.values() if m.gpu_type}
    assert families == {"n1", "g2", "a2", "a3"}
    a3 = catalog["a3-highgpu-8g"]
    assert (a3.gpu_count, a3.vcpus, a3.memory_gb, a3.attaches_gpus) == (8, 208, 1872, False)
    assert catalog["n1-standard-8-v100"].attaches_gpus
    for machine in catalog.values():
        assert 0 < machine.spot_usd_per_hour < machine.on_demand_usd_per_hour, machine
    assert all(z.startswith("us-central1-") for z in gpu_zones()["nvidia-h100-80gb"]["us-central1"])


def test_a_machine_costs_the_sum_of_its_parts() -> None:
    book = shipped_prices()
    g2 = load_catalog()["g2-standard-24"]  # 24 vCPUs, 96 GB, 2 L4
    rate = book.components
    expected = 24 * rate["g2/vcpu"].spot + 96 * rate["g2/memory_gb"].spot
    expected += 2 * rate["gpu/nvidia-l4"].spot
    assert g2.spot_usd_per_hour == pytest.approx(expected, abs=1e-4)
    assert book.priced_at and book.source and book.region == "us-central1"


@pytest.fixture
def billing() -> Iterator[tuple[BillingCatalogApi, str]]:
    api = BillingCatalogApi(skus_for(shipped_prices(), "us-central1", scale=1.1))
    service = HttpService(api).start()
    yield api, service.endpoint
    service.stop()


def refresh(path: Path, endpoint: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    args = ["machines", "--refresh-prices", "--prices-file", str(path)]
    code = cli([*args, "--billing-endpoint", endpoint])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_refresh_writes_every_rate_from_the_skus_the_client_lists(
    billing: tuple[BillingCatalogApi, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPOTLINE_REGION", "us-central1")
    api, endpoint = billing
    path = tmp_path / "prices.json"

    code, said = refresh(path, endpoint, capsys)

    assert code == 0, said
    book = PriceBook.model_validate_json(path.read_text())
    assert set(book.components) == needed(shapes().values())
    shipped = shipped_prices().components
    for part, rate in book.components.items():  # the region's rates, not EMEA's or a commitment's
        assert rate.spot == pytest.approx(shipped[part].spot * 1.1, abs=1e-6), part
        assert rate.on_demand == pytest.approx(shipped[part].on_demand * 1.1, abs=1e-6), part
    assert book.source.startswith("Cloud Billing Catalog API") and book.priced_at in said
    assert priced(book)["a3-highgpu-8g"].on_demand_usd_per_hour == pytest.approx(
        load_catalog()["a3-highgpu-8g"].on_demand_usd_per_hour * 1.1, abs=1e-3
    )
    # What the client sent: the service's SKUs in dollars, every page.
    requests = api.recorder.requests
    assert {r.path for r in requests} == {SERVICE_PATH}
    assert all(r.query["currencyCode"] == "USD" for r in requests)
    pages = -(-len(api.skus) // api.page_size)
    assert [r.query.get("pageToken") for r in requests] == [None] + [
        str(n * api.page_size) for n in range(1, pages)
    ]


def test_a_partial_answer_names_what_is_missing_and_keeps_the_old_file(
    billing: tuple[BillingCatalogApi, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPOTLINE_REGION", "us-central1")
    api, endpoint = billing
    api.skus = [
        s
        for s in api.skus
        if s["description"]
        != "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas"
        and "A2 Instance Ram" not in s["description"]
    ]
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"kept": True}))

    code, said = refresh(path, endpoint, capsys)

    assert code == 1
    assert "no SKU in us-central1 for: a2/memory_gb spot, a2/memory_gb on-demand, " in said
    assert "gpu/nvidia-h100-80gb spot" in said and "kept" in said
    assert json.loads(path.read_text()) == {"kept": True}


def test_a_refused_request_keeps_the_old_file(
    billing: tuple[BillingCatalogApi, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api, endpoint = billing
    api.fail = ApiError(403, "Cloud Billing API has not been used in project acme")
    path = tmp_path / "prices.json"
    path.write_text("old")

    code, said = refresh(path, endpoint, capsys)

    assert code == 1 and "Cloud Billing API has not been used" in said
    assert path.read_text() == "old"


def rate(description: str, usage: str = "OnDemand", unit: str = "h", usd: float = 1.0) -> SkuRate:
    return SkuRate("0000-0000", description, usage, ("us-central1",), unit, usd)


@pytest.mark.parametrize(
    ("sku", "part"),
    [
        (rate("N1 Predefined Instance Core running in Americas"), ("n1/vcpu", "on_demand")),
        (
            rate("Spot Preemptible G2 Instance Ram running in Americas", "Preemptible", "GiBy.h"),
            ("g2/memory_gb", "spot"),
        ),
        (rate("Nvidia H100 80GB GPU running in Americas"), ("gpu/nvidia-h100-80gb", "on_demand")),
        (rate("Nvidia Tesla A100 GPU running in Americas"), ("gpu/nvidia-tesla-a100", "on_demand")),
        # The Cloud Billing Catalog's own wording of a Spot GPU: "attached to Spot
        # Preemptible VMs", after the model (a few SKUs put "Spot Preemptible " first).
        (
            rate("Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa", "Preemptible"),
            ("gpu/nvidia-l4", "spot"),
        ),
        (
            rate(
                "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas",
                "Preemptible",
            ),
            ("gpu/nvidia-tesla-t4", "spot"),
        ),
        (
            rate(
                "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas",
                "Preemptible",
            ),
            ("gpu/nvidia-h100-80gb", "spot"),
        ),
        (
            rate("Spot Preemptible Nvidia L4 GPU running in Americas", "Preemptible"),
            ("gpu/nvidia-l4", "spot"),
        ),
        (rate("Nvidia L4 GPU running in Iowa"), ("gpu/nvidia-l4", "on_demand")),
        # An A3 Mega's H100 is another part than an A3 High's.
        (
            rate(
                "Nvidia H100 80GB Mega GPU attached to Spot Preemptible VMs running in Americas",
                "Preemptible",
            ),
            None,
        ),
        (rate("Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa"), None),
        # Not rates spotline uses: a commitment, a Spot description sold on demand,
        # memory per hour (not per GiB hour), a workstation, a GPU not in the catalog.
        (rate("N1 Predefined Instance Core running in Americas", "Commit1Yr"), None),
        (rate("Spot Preemptible Nvidia L4 GPU running in Americas", "OnDemand"), None),
        (rate("A2 Instance Ram running in Americas", unit="h"), None),
        (rate("Nvidia RTX Virtual Workstation - Tesla T4 GPU running in Americas"), None),
        (rate("Nvidia B200 GPU running in Americas"), None),
    ],
)
def test_a_sku_is_read_as_the_part_it_prices_or_not_at_all(
    sku: SkuRate, part: tuple[str, str] | None
) -> None:
    assert part_of(sku) == part


def test_two_rates_for_one_part_are_an_error_naming_both() -> None:
    skus = [
        rate("Nvidia L4 GPU running in Americas", usd=0.56),
        rate("Nvidia L4 GPU running in Americas", usd=0.60),
        rate("Spot Preemptible Nvidia L4 GPU running in Americas", "Preemptible", usd=0.2),
    ]
    with pytest.raises(PriceError, match=r"gpu/nvidia-l4 on_demand: 0.56 and 0.6"):
        rates(skus, "us-central1", {"gpu/nvidia-l4"})
    assert rates(skus[1:], "us-central1", {"gpu/nvidia-l4"})["gpu/nvidia-l4"].on_demand == 0.6
