/*
 * /api/docs/: starts Swagger UI (local files from drf-spectacular-sidecar) with the request
 * signer of apidocs-signing.js, and wires the key/secret form above it.
 */
(function () {
  "use strict";

  const signing = window.MemoryPlatformSigning;
  const script = document.getElementById("mp-swagger-init");
  let settings = {};
  try {
    settings = JSON.parse(script.dataset.settings || "{}");
  } catch (e) {
    console.warn("SWAGGER_UI_SETTINGS is not JSON; using the defaults", e);
  }

  window.ui = SwaggerUIBundle({
    deepLinking: true,
    ...settings,
    url: script.dataset.schemaUrl,
    dom_id: "#swagger-ui",
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    requestInterceptor: (request) => signing.requestInterceptor(request),
  });

  const form = document.getElementById("mp-signing-form");
  const keyInput = document.getElementById("mp-api-key");
  const secretInput = document.getElementById("mp-secret");
  const versionInput = document.getElementById("mp-version");
  const rememberInput = document.getElementById("mp-remember");
  const status = document.getElementById("mp-status");

  function show(identity, message) {
    if (message) {
      status.textContent = message;
    } else if (identity) {
      status.textContent = `Signing as ${identity.apiKey} (v${identity.version}).`;
    } else {
      status.textContent = "Not signing: requests go out without authentication.";
    }
    status.dataset.signing = identity ? "on" : "off";
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    try {
      const identity = signing.setCredentials({
        apiKey: keyInput.value,
        secret: secretInput.value,
        version: versionInput.value,
        remember: rememberInput.checked,
      });
      // The secret need not stay in the form once the signer holds it.
      secretInput.value = "";
      secretInput.placeholder = "(set)";
      show(identity);
    } catch (e) {
      show(signing.currentIdentity(), e.message);
    }
  });

  document.getElementById("mp-forget").addEventListener("click", () => {
    signing.clearCredentials();
    keyInput.value = "";
    secretInput.value = "";
    secretInput.placeholder = "";
    rememberInput.checked = false;
    show(null);
  });

  const restored = signing.restoreCredentials();
  if (restored) {
    keyInput.value = restored.apiKey;
    versionInput.value = String(restored.version);
    rememberInput.checked = true;
    secretInput.placeholder = "(set)";
  }
  if (!window.crypto || !window.crypto.subtle) {
    show(restored, "WebCrypto is unavailable here (plain http on a non-local host): signing needs HTTPS or localhost.");
  } else {
    show(restored);
  }
})();
