/*
 * Request signing for the API docs page (/api/docs/), in the browser, with WebCrypto.
 *
 * The bytes signed are exactly those tenants/authentication.py (signed_message) verifies:
 *   v1: str(timestamp) + raw body (POST, PUT, PATCH; GET and DELETE sign the timestamp alone)
 *   v2: "v2\n{timestamp}\n{nonce}\n{METHOD}\n{path?query}\n" + raw body (any method)
 * and the signature is the lower-case hex HMAC-SHA256 of them with the key's secret.
 *
 * The key and secret live in this closure (and in this tab's sessionStorage only when asked);
 * they are never sent: only the headers computed from them go out, and only to this origin.
 */
(function (global) {
  "use strict";

  const BODY_SIGNED_METHODS = ["POST", "PUT", "PATCH"];
  const STORAGE_KEY = "memoryplatform-signing";
  const encoder = new TextEncoder();

  function toBytes(body) {
    if (body === undefined || body === null || body === "") {
      return new Uint8Array(0);
    }
    if (typeof body === "string") {
      return encoder.encode(body); // what fetch sends for a string body: UTF-8
    }
    if (body instanceof Uint8Array) {
      return body;
    }
    if (body instanceof ArrayBuffer) {
      return new Uint8Array(body);
    }
    throw new TypeError("only a string or bytes body can be signed");
  }

  function concat(head, body) {
    const out = new Uint8Array(head.length + body.length);
    out.set(head, 0);
    out.set(body, head.length);
    return out;
  }

  /** The exact bytes the server signs (tenants/authentication.py, signed_message). */
  function signedMessage({ version, method, timestamp, body, nonce, fullPath }) {
    const verb = String(method || "GET").toUpperCase();
    const raw = toBytes(body);
    if (Number(version) === 2) {
      const head = `v2\n${timestamp}\n${nonce}\n${verb}\n${fullPath}\n`;
      return concat(encoder.encode(head), raw);
    }
    const signedBody = BODY_SIGNED_METHODS.includes(verb) ? raw : new Uint8Array(0);
    return concat(encoder.encode(String(timestamp)), signedBody);
  }

  async function hmacSha256Hex(secret, message) {
    const subtle = global.crypto && global.crypto.subtle;
    if (!subtle) {
      // Browsers offer WebCrypto only in secure contexts: HTTPS, or http://localhost.
      throw new Error("WebCrypto is unavailable here: open the page over HTTPS or on localhost");
    }
    const key = await subtle.importKey(
      "raw",
      encoder.encode(secret),
      { name: "HMAC", hash: "SHA-256" },
      false,
      ["sign"],
    );
    const mac = new Uint8Array(await subtle.sign("HMAC", key, message));
    return Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  /** 24 characters of [A-Za-z0-9_-]: a fresh single-use v2 nonce (16..128 allowed). */
  function newNonce() {
    const bytes = new Uint8Array(18);
    global.crypto.getRandomValues(bytes);
    return btoa(String.fromCharCode(...bytes))
      .replace(/\+/g, "-")
      .replace(/\//g, "_")
      .replace(/=+$/, "");
  }

  /**
   * The authentication headers of one request. `fullPath` is the path and query exactly as sent
   * ("/memories/trash?page=2"); `body` the exact string or bytes sent. `timestamp` and `nonce`
   * default to now and a fresh random one.
   */
  async function signingHeaders({ apiKey, secret, version = 2, method, fullPath, body, timestamp, nonce }) {
    const ts = String(timestamp === undefined ? Math.floor(Date.now() / 1000) : timestamp);
    const v = Number(version) === 1 ? 1 : 2;
    const headers = { "X-API-Key": apiKey, "X-Timestamp": ts };
    let usedNonce = "";
    if (v === 2) {
      usedNonce = nonce || newNonce();
      headers["X-Signature-Version"] = "2";
      headers["X-Nonce"] = usedNonce;
    }
    const message = signedMessage({ version: v, method, timestamp: ts, body, nonce: usedNonce, fullPath });
    headers["X-Signature"] = await hmacSha256Hex(secret, message);
    return headers;
  }

  // --- the credentials of this page -------------------------------------------------------------

  let credentials = null;

  function setCredentials({ apiKey, secret, version = 2, remember = false }) {
    if (!apiKey || !secret) {
      throw new Error("both the API key and the secret are needed");
    }
    credentials = { apiKey: String(apiKey).trim(), secret: String(secret), version: Number(version) === 1 ? 1 : 2 };
    try {
      if (remember) {
        global.sessionStorage.setItem(STORAGE_KEY, JSON.stringify(credentials));
      } else {
        global.sessionStorage.removeItem(STORAGE_KEY);
      }
    } catch (e) {
      // sessionStorage may be disabled; the credentials still work for this page.
    }
    return { apiKey: credentials.apiKey, version: credentials.version };
  }

  function clearCredentials() {
    credentials = null;
    try {
      global.sessionStorage.removeItem(STORAGE_KEY);
    } catch (e) {
      // nothing stored
    }
  }

  function restoreCredentials() {
    try {
      const saved = JSON.parse(global.sessionStorage.getItem(STORAGE_KEY) || "null");
      if (saved && saved.apiKey && saved.secret) {
        credentials = saved;
        return { apiKey: saved.apiKey, version: saved.version };
      }
    } catch (e) {
      // unreadable: start without
    }
    return null;
  }

  function currentIdentity() {
    return credentials ? { apiKey: credentials.apiKey, version: credentials.version } : null;
  }

  /**
   * Swagger UI's requestInterceptor: signs "Try it out" requests to this origin. The schema
   * download (loadSpec) and requests elsewhere go out unchanged, so no signature (and nothing
   * derived from the secret) ever leaves for another site.
   */
  async function requestInterceptor(request) {
    if (!credentials || request.loadSpec) {
      return request;
    }
    const url = new URL(request.url, global.document.baseURI);
    if (url.origin !== global.location.origin) {
      return request;
    }
    if (request.body !== undefined && request.body !== null && typeof request.body === "object"
        && !(request.body instanceof Uint8Array) && !(request.body instanceof ArrayBuffer)) {
      // Sign what is sent: serialise once here, send that very string.
      request.body = JSON.stringify(request.body);
    }
    const headers = await signingHeaders({
      apiKey: credentials.apiKey,
      secret: credentials.secret,
      version: credentials.version,
      method: request.method || "GET",
      fullPath: url.pathname + url.search,
      body: request.body,
    });
    request.headers = Object.assign({}, request.headers || {}, headers);
    return request;
  }

  global.MemoryPlatformSigning = Object.freeze({
    signedMessage,
    signingHeaders,
    setCredentials,
    clearCredentials,
    restoreCredentials,
    currentIdentity,
    requestInterceptor,
  });
})(window);
