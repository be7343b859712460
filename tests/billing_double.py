"""The Cloud Billing Catalog API v1's ``services.skus.list``, as a local HTTP
double (``spotline.infra.localcloud.wire``): it checks what the client really sends
(the service's path, the currency) and answers SKUs in Google's JSON, a page
at a time, as the API does."""

from __future__ import annotations

import zlib
from typing import Any

from spotline.infra.localcloud.discovery import Contract
from spotline.infra.localcloud.wire import ApiError, JsonDict, RecordedRequest, Recorder
from spotline.shared.domain.prices import PriceBook

SERVICE_PATH = "/v1/services/6F81-5844-456A/skus"
_FAMILY_NAMES = {"n1": "N1 Predefined", "g2": "G2", "a2": "A2", "a3": "A3", "e2": "E2"}
_GPU_NAMES = {
    "nvidia-tesla-t4": "Tesla T4",
    "nvidia-l4": "L4",
    "nvidia-tesla-a100": "Tesla A100",
    "nvidia-a100-80gb": "A100 80GB",
    "nvidia-h100-80gb": "H100 80GB",
    "nvidia-tesla-v100": "Tesla V100",
    "nvidia-tesla-p100": "Tesla P100",
}


def sku(description: str, usage_type: str, regions: list[str], unit: str, usd: float) -> JsonDict:
    """One SKU as the API's JSON spells it (units as a string, nanos an int)."""
    units = int(usd)
    number = zlib.crc32(f"{description}|{usage_type}|{regions}".encode())
    sku_id = f"{number:08X}"[:4] + "-" + f"{number:08X}"[4:]
    return {
        "name": f"services/6F81-5844-456A/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": "GPU" if "GPU" in description else "CPU",
            "usageType": usage_type,
        },
        "serviceRegions": regions,
        "pricingInfo": [
            {
                "effectiveTime": "2026-01-01T00:00:00Z",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {
                                "currencyCode": "USD",
                                "units": str(units),
                                "nanos": round((usd - units) * 1e9),
                            },
                        }
                    ],
                },
                "currencyConversionRate": 1,
            }
        ],
        "serviceProviderName": "Google",
    }


def skus_for(book: PriceBook, region: str, scale: float = 1.0) -> list[JsonDict]:
    """The SKUs that price every part of ``book`` in ``region`` (times ``scale``),
    with SKUs spotline must ignore around them."""
    found = []
    for part, rate in book.components.items():
        group, name = part.split("/")
        if group == "gpu":
            resource, unit = f"Nvidia {_GPU_NAMES[name]} GPU", "h"
        else:
            what = "Core" if name == "vcpu" else "Ram"
            resource = f"{_FAMILY_NAMES[group]} Instance {what}"
            unit = "h" if what == "Core" else "GiBy.h"
        # The catalog's words: "Spot Preemptible G2 Instance Core ...", but
        # "Nvidia L4 GPU attached to Spot Preemptible VMs ..." for a GPU.
        spot = (
            f"{resource} attached to Spot Preemptible VMs"
            if group == "gpu"
            else f"Spot Preemptible {resource}"
        )
        for usage, described, usd in (
            ("OnDemand", resource, rate.on_demand),
            ("Preemptible", spot, rate.spot),
        ):
            text = f"{described} running in Americas"
            found.append(sku(text, usage, [region, "us-east1"], unit, round(usd * scale, 6)))
            # The same part elsewhere, and bought otherwise: not a rate to use.
            found.append(sku(text.replace("Americas", "EMEA"), usage, ["europe-west4"], unit, 9.0))
        found.append(sku(f"Commitment v1: {resource} in Americas for 1 Year", "Commit1Yr",
                         [region], unit, 0.001))  # fmt: skip
    return found


class BillingCatalogApi:
    """Answers ``GET /v1/services/6F81-5844-456A/skus`` from ``skus``, ``page_size``
    at a time; records every request."""

    def __init__(self, skus: list[JsonDict], page_size: int = 40) -> None:
        self.skus = skus
        self.page_size = page_size
        self.recorder = Recorder(Contract([("cloudbilling", "v1")]))
        self.fail: ApiError | None = None

    def handle(self, request: RecordedRequest) -> tuple[int, Any]:
        self.recorder.record(request)
        if self.fail is not None:
            raise self.fail
        if request.method != "GET" or request.path != SERVICE_PATH:
            raise ApiError(404, f"no route {request.method} {request.path}")
        if request.query.get("currencyCode") != "USD":
            raise ApiError(400, f"currencyCode: {request.query.get('currencyCode')!r}")
        start = int(request.query.get("pageToken") or 0)
        page = self.skus[start : start + self.page_size]
        answer: JsonDict = {"skus": page}
        if start + self.page_size < len(self.skus):
            answer["nextPageToken"] = str(start + self.page_size)
        return 200, answer
