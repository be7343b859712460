"""``spotline machines --refresh-prices``: the price file from the Cloud
Billing Catalog API.

Lists Compute Engine's SKUs (``services/6F81-5844-456A``) with the real
client library, ``google-cloud-billing`` (the ``prices`` extra), over its REST
transport; keeps the Spot and on-demand rate of every part the catalog's
machines are billed for in the configured region (``spotline.shared.domain.sku_prices``)
and writes the price file, dated today. Nothing is written unless every part
is priced: on a bad or partial answer the old file stays and the error names
what is missing.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotline.shared.domain.catalog import shapes
from spotline.shared.domain.prices import PriceBook, needed
from spotline.shared.domain.sku_prices import COMPUTE_SERVICE, PriceError, SkuRate, rates

if TYPE_CHECKING:
    from google.cloud.billing_v1 import CloudCatalogClient

SOURCE = f"Cloud Billing Catalog API, {COMPUTE_SERVICE}/skus"


def shipped_price_file() -> Path:
    from importlib import resources

    return Path(str(resources.files("spotline.shared").joinpath("data/prices.json")))


def catalog_client(endpoint: str | None) -> CloudCatalogClient:
    """The client, on ``cloudbilling.googleapis.com`` or on ``endpoint`` (a
    local double: no credentials there)."""
    try:
        from google.cloud.billing_v1 import CloudCatalogClient
    except ImportError as err:
        raise PriceError(
            "google-cloud-billing is not installed: pip install 'spotline[prices]'"
        ) from err
    from google.api_core.client_options import ClientOptions

    options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    credentials = None
    if endpoint and endpoint.startswith(("http://127.0.0.1", "http://localhost")):
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    return CloudCatalogClient(transport="rest", client_options=options, credentials=credentials)


def sku_rates(client: CloudCatalogClient) -> list[SkuRate]:
    """Every Compute Engine SKU, in US dollars, as ``SkuRate`` (all pages)."""
    from google.cloud.billing_v1 import ListSkusRequest

    request = ListSkusRequest(parent=COMPUTE_SERVICE, currency_code="USD")
    found = []
    for sku in client.list_skus(request=request):
        if not sku.pricing_info:
            continue
        expression = sku.pricing_info[0].pricing_expression
        tiers = list(expression.tiered_rates)
        usd = tiers[0].unit_price.units + tiers[0].unit_price.nanos / 1e9 if tiers else 0.0
        found.append(
            SkuRate(
                sku_id=sku.sku_id,
                description=sku.description,
                usage_type=sku.category.usage_type,
                regions=tuple(sku.service_regions),
                usage_unit=expression.usage_unit,
                usd=round(usd, 9),
            )
        )
    return found


def refresh(path: Path, region: str, endpoint: str | None, today: date) -> PriceBook:
    """Write the price file at ``path`` from the API; the prices written.

    Raises:
        PriceError: a part the catalog needs has no price in the answer (the
            file at ``path`` is left as it was).
        google.api_core.exceptions.GoogleAPIError: the API refused or failed.
    """
    skus = sku_rates(catalog_client(endpoint))
    book = PriceBook(
        priced_at=today.isoformat(),
        source=SOURCE,
        region=region,
        components=rates(skus, region, needed(shapes().values())),
    )
    _write(path, book.model_dump(mode="json"))
    return book


def _write(path: Path, content: dict[str, Any]) -> None:
    """Whole or not at all: a new file renamed over the old one."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=".prices-", suffix=".json")
    with os.fdopen(handle, "w") as file:
        json.dump(content, file, indent=2)
        file.write("\n")
    os.replace(name, path)
