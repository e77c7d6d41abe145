// The login (docs/CONSOLE.md, "Security"): with an authorizer, the console shows each user what
// their ACLs allow, after a login by one of the broker's own SASL (SCRAM / PLAIN) users. The
// session is an HttpOnly cookie: this code never sees it.
import {$, api, post} from "./dom.js";

export let session = null;  // {login_required, principal, authorizer, note}

export async function checkSession() {
  session = await api("/api/session");
  showSession();
  return session;
}

export function loggedOut() {
  return session !== null && session.login_required && !session.principal;
}

function showSession() {
  const s = session;
  $("#who").textContent = s.principal ? s.principal : "";
  $("#logout").hidden = !s.principal;
  $("#no-authorizer").hidden = s.login_required;
  $("#no-authorizer").textContent = s.note || "";
  document.body.classList.toggle("logged-out", loggedOut());
  $("#login").hidden = !loggedOut();
}

export function setupLogin(onChange) {
  $("#login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = $("#login-error");
    out.textContent = "";
    try {
      await post("/api/login", "login", {username: $("#login-user").value, password: $("#login-password").value});
      $("#login-password").value = "";
      await checkSession();
      onChange();
    } catch (e) {
      out.textContent = e.message;
    }
  });
  $("#logout").addEventListener("click", async () => {
    try { await post("/api/logout", "logout", {}); } catch (e) { /* logged out either way */ }
    await checkSession();
    onChange();
  });
  document.addEventListener("oncelog-login-needed", () => {
    if (session && session.login_required) { session.principal = null; showSession(); }
  });
}
