"""/api/docs/ in headless Chromium: the page signs "Try it out" requests with WebCrypto exactly
like the server verifies (tenants/authentication.py), with Swagger UI and the helper served from
our static files. A screenshot at each step."""

from __future__ import annotations

import json

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from memories.models import Memory
from memoryplatform.client import sign, sign_v2
from tenants.models import Team
from tenants.services import api_key_issue

pytestmark = pytest.mark.django_db(transaction=True)

# Records what Swagger UI sends (it uses fetch), so the test can read the headers that went out.
_RECORD_FETCH = """
window.__sent = [];
const original = window.fetch;
window.fetch = function (input, init) {
  const headers = Object.assign({}, (init && init.headers) || {});
  window.__sent.push({url: String(input && input.url ? input.url : input),
                      method: (init && init.method) || "GET", headers: headers,
                      body: init && typeof init.body === "string" ? init.body : null});
  return original.apply(this, arguments);
};
"""


def _open_docs(browser, live_server) -> WebDriverWait:  # type: ignore[no-untyped-def]
    browser.get(f"{live_server.url}/api/docs/")
    wait = WebDriverWait(browser, 30)
    wait.until(lambda d: d.find_elements(By.ID, "operations-stats-stats_retrieve"))
    return wait


def _js_headers(browser, **kwargs: object) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return browser.execute_async_script(  # type: ignore[no-any-return]
        "const done = arguments[arguments.length - 1];"
        "window.MemoryPlatformSigning.signingHeaders(arguments[0])"
        "  .then(done, (e) => done({error: String(e)}));",
        kwargs,
    )


def test_the_page_signs_like_the_python_client(browser, live_server, shot):
    _open_docs(browser, live_server)
    shot("loaded")
    secret = "s3cr3t-ÄÖ-键"
    body = json.dumps({"agent_id": "a1", "content": "用户偏好简洁回复"}, ensure_ascii=False)
    raw = body.encode()

    v1 = _js_headers(
        browser,
        apiKey="mk_x",
        secret=secret,
        version=1,
        method="post",
        fullPath="/memories/personal",
        body=body,
        timestamp=1700000000,
    )
    assert v1 == {
        "X-API-Key": "mk_x",
        "X-Timestamp": "1700000000",
        "X-Signature": sign(secret, 1700000000, raw),
    }
    # v1: GET and DELETE sign the timestamp alone, whatever body they carry.
    v1_delete = _js_headers(
        browser,
        apiKey="mk_x",
        secret=secret,
        version=1,
        method="DELETE",
        fullPath="/x",
        body=body,
        timestamp=1700000000,
    )
    assert v1_delete["X-Signature"] == sign(secret, 1700000000)

    nonce = "abcdefghijklmnop_-12"
    path = "/memories/trash?agent_id=a%40b&page=2"
    v2 = _js_headers(
        browser,
        apiKey="mk_x",
        secret=secret,
        version=2,
        method="delete",
        fullPath=path,
        body=body,
        timestamp=1700000001,
        nonce=nonce,
    )
    assert v2 == {
        "X-API-Key": "mk_x",
        "X-Timestamp": "1700000001",
        "X-Signature-Version": "2",
        "X-Nonce": nonce,
        "X-Signature": sign_v2(secret, 1700000001, nonce, "DELETE", path, raw),
    }
    fresh = _js_headers(browser, apiKey="k", secret="s", method="GET", fullPath="/stats")
    assert len(fresh["X-Nonce"]) >= 16 and fresh["X-Signature-Version"] == "2"


@pytest.mark.parametrize("version", ["2", "1"])
def test_try_it_out_sends_signed_requests_the_server_accepts(browser, live_server, shot, version):
    team = Team.objects.create(id="team_docs_ui", name="Docs")
    issued = api_key_issue(team=team, label="docs page")
    wait = _open_docs(browser, live_server)
    browser.execute_script(_RECORD_FETCH)

    browser.find_element(By.ID, "mp-api-key").send_keys(issued.key_id)
    browser.find_element(By.ID, "mp-secret").send_keys(issued.secret)
    browser.find_element(By.CSS_SELECTOR, f"#mp-version option[value='{version}']").click()
    browser.find_element(By.ID, "mp-use").click()
    status = browser.find_element(By.ID, "mp-status")
    assert status.get_attribute("data-signing") == "on"
    assert issued.key_id in status.text
    # The form forgets the secret once the signer holds it.
    assert browser.find_element(By.ID, "mp-secret").get_attribute("value") == ""

    # GET /stats through Swagger UI: Try it out, Execute, a 200 from the server.
    op = browser.find_element(By.ID, "operations-stats-stats_retrieve")
    op.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait.until(lambda d: op.find_elements(By.CSS_SELECTOR, ".try-out__btn"))
    op.find_element(By.CSS_SELECTOR, ".try-out__btn").click()
    op.find_element(By.CSS_SELECTOR, ".execute").click()
    wait.until(
        lambda d: op.find_elements(
            By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status"
        )
    )
    shot(f"stats-v{version}")
    code = op.find_element(By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status").text
    assert code.strip().startswith("200"), code
    assert '"ok": true' in op.find_element(By.CSS_SELECTOR, ".live-responses-table").text

    # POST /memories/personal with a Chinese body: the body is signed as sent (201 created).
    op = browser.find_element(By.ID, "operations-memories-memories_personal_create")
    op.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait.until(lambda d: op.find_elements(By.CSS_SELECTOR, ".try-out__btn"))
    op.find_element(By.CSS_SELECTOR, ".try-out__btn").click()
    textarea = op.find_element(By.CSS_SELECTOR, "textarea.body-param__text")
    content = f"文档页签名测试 v{version}"
    browser.execute_script(
        # React owns the textarea: set the value through the native setter and fire input.
        "const t = arguments[0];"
        "Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set"
        "  .call(t, arguments[1]);"
        "t.dispatchEvent(new Event('input', {bubbles: true}));",
        textarea,
        json.dumps({"agent_id": "docs_agent", "content": content}, ensure_ascii=False),
    )
    op.find_element(By.CSS_SELECTOR, ".execute").click()
    wait.until(
        lambda d: op.find_elements(
            By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status"
        )
    )
    shot(f"write-v{version}")
    code = op.find_element(By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status").text
    assert code.strip().startswith("201"), code
    assert Memory.objects.filter(team=team, agent_id="docs_agent", content=content).exists()

    sent = browser.execute_script("return window.__sent")
    api_calls = [s for s in sent if "/api/schema" not in s["url"]]
    assert len(api_calls) == 2
    for call in api_calls:
        headers = call["headers"]
        assert headers["X-API-Key"] == issued.key_id
        assert len(headers["X-Signature"]) == 64
        assert (headers.get("X-Signature-Version") == "2") == (version == "2")
        # The secret itself never goes out, in a header or in the body.
        assert all(issued.secret not in str(v) for v in headers.values())
        assert issued.secret not in (call["body"] or "")


def test_without_credentials_requests_are_unsigned_and_refused(browser, live_server):
    wait = _open_docs(browser, live_server)
    assert browser.find_element(By.ID, "mp-status").get_attribute("data-signing") == "off"
    op = browser.find_element(By.ID, "operations-stats-stats_retrieve")
    op.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait.until(lambda d: op.find_elements(By.CSS_SELECTOR, ".try-out__btn"))
    op.find_element(By.CSS_SELECTOR, ".try-out__btn").click()
    op.find_element(By.CSS_SELECTOR, ".execute").click()
    wait.until(
        lambda d: op.find_elements(
            By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status"
        )
    )
    code = op.find_element(By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status").text
    assert code.strip().startswith("401"), code
