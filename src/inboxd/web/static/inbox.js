// The live inbox: follows the mailbox over /api/ws and swaps in the list's rows from the server
// whenever mail arrives, and after every reconnect (so nothing that arrived meanwhile is missed).
// Without this file the page still works: reload to see new mail.
"use strict";

(() => {
  const inbox = document.querySelector("[data-live-mailbox]");
  if (!inbox || inbox.dataset.page !== "1" || !window.WebSocket) return;
  const mailbox = inbox.dataset.liveMailbox;
  // The rows come from the list's own place: a mailbox, or the sandbox (whose rows show envelopes).
  const rowsUrl = inbox.dataset.rows;
  const status = document.getElementById("live-status");
  const unread = document.getElementById("unread-count");
  let delay = 500;
  let refreshing = null;
  let again = false;
  let signedOut = false;

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  async function refresh() {
    // One fetch at a time; a burst of mails during a fetch costs one more fetch, not one per mail.
    if (refreshing) { again = true; return refreshing; }
    refreshing = (async () => {
      do {
        again = false;
        const response = await fetch(rowsUrl, { credentials: "same-origin", cache: "no-store" });
        if (!response.ok) throw new Error(`rows ${response.status}`);
        const doc = new DOMParser().parseFromString(`<table>${await response.text()}</table>`, "text/html");
        const rows = doc.getElementById("message-rows");
        const current = document.getElementById("message-rows");
        if (rows && current) {
          current.replaceWith(document.adoptNode(rows));
          unread.textContent = `${rows.dataset.unread} unread`;
          document.getElementById("used").textContent = rows.dataset.used;
          if (Number(rows.dataset.count) > 0) {
            document.getElementById("message-table").hidden = false;
            const empty = document.getElementById("empty-state");
            if (empty) empty.hidden = true;
          }
        }
      } while (again);
    })().finally(() => { refreshing = null; });
    return refreshing;
  }

  async function token() {
    const body = new URLSearchParams({ csrf_token: inbox.dataset.csrf });
    const response = await fetch(`/mailboxes/${mailbox}/live-token`, {
      method: "POST", body, credentials: "same-origin",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
    });
    if (!response.ok) throw new Error(`token ${response.status}`);
    return (await response.json()).token;
  }

  function retry() {
    setStatus("retrying", "Reconnecting…");
    setTimeout(connect, delay);
    delay = Math.min(delay * 2, 15000);
  }

  async function connect() {
    let value;
    try { value = await token(); } catch { retry(); return; }
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/api/ws`);
    let authed = false;
    socket.addEventListener("open", () => socket.send(JSON.stringify({ type: "auth", token: value })));
    socket.addEventListener("message", (event) => {
      let data;
      try { data = JSON.parse(event.data); } catch { return; }
      if (data.type === "auth_ok") {
        authed = true;
        delay = 500;
        setStatus("live", "Live");
        refresh().catch(() => {});  // catch up on what arrived while we were away
      } else if (data.type === "new_email") {
        refresh().catch(() => {});
      } else if (data.error === "too_many_connections") {
        setStatus("off", "Too many open tabs for live updates: reload to see new mail");
      } else if (data.error === "session_ended") {
        // Signed out (here, in another tab, everywhere): a new token would be refused, so stop.
        signedOut = true;
        setStatus("off", "Session ended: reload the page for live updates");
      }
    });
    socket.addEventListener("close", () => {
      if (signedOut || (status.dataset.state === "off" && !authed)) return;
      retry();
    });
  }

  connect();
})();
