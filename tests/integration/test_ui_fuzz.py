"""Every endpoint of the UI app fuzzed from its own OpenAPI document (schemathesis), as a viewer and an admin.

Schemathesis generates valid and invalid query strings and form bodies from the parameters the
app declares; whatever it sends, the app never answers 500 and every response carries the security
headers.  Bounded (``MAX_EXAMPLES`` per endpoint and user) to fit in CI.
"""

from __future__ import annotations

import copy

import pytest
import schemathesis
from _ui_app import DAG_ID, SERIES, as_user, install, make_app
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from airflow_metric_gate.plugins.app import SECURITY_HEADERS

MAX_EXAMPLES = 40

#: Values that exist in the test store: the fuzzer mixes them with anything else, so that its
#: requests reach past "not found" into the pages, charts and forms.
KNOWN = {"series": SERIES[0], "backend": SERIES[1], "suite": SERIES[2], "dag_id": DAG_ID, "run_id": "scheduled__5",
         "task_id": "evaluate_gate"}


def _document(app) -> dict:
    document = copy.deepcopy(app.openapi())
    for operation in document["paths"].values():
        for spec in operation.values():
            for parameter in spec.get("parameters", ()):
                if parameter["name"] in KNOWN:
                    parameter["schema"] = {"anyOf": [{"enum": [KNOWN[parameter["name"]]]}, parameter["schema"]]}
    return document


APP = make_app()
SCHEMA = schemathesis.openapi.from_dict(_document(APP))
SCHEMA.app = APP

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _store(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        install(patch, tmp_path_factory.mktemp("ui-fuzz"))
        yield


def test_the_document_declares_every_route_and_its_parameters():
    paths = APP.openapi()["paths"]
    assert set(paths) == {"/", "/series", "/task", "/mark", "/accept"}
    assert {p["name"] for p in paths["/series"]["get"]["parameters"]} >= {"series", "backend", "suite", "declaration"}
    for form in ("/mark", "/accept"):
        assert "application/x-www-form-urlencoded" in paths[form]["post"]["requestBody"]["content"]


@pytest.mark.parametrize("user", ["viewer", "admin"])
@SCHEMA.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
def test_no_input_makes_a_500_or_a_response_without_the_security_headers(case, user):
    response = case.call(headers=as_user(user))
    case.validate_response(response, checks=[not_a_server_error])
    headers = {k.lower(): v[-1] if isinstance(v, list) else v for k, v in response.headers.items()}
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name.lower()) == value, (name, response.status_code, case.as_curl_command())
