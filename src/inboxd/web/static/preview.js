// The HTML tab's preview controls: the message at phone (375 px), tablet (768 px) or desktop width,
// and on a dark background, without reloading the page. The width is the frame's; the dark
// background is the server's (`?dark=1` on the frame's document, which keeps its sandboxing CSP),
// so only the frame reloads. The choice is kept for the next message in this browser.
"use strict";

(() => {
  const preview = document.querySelector("[data-preview]");
  if (!preview) return;
  const bar = preview.querySelector(".html-preview-bar");
  const frame = preview.querySelector(".html-frame");
  const dark = preview.querySelector("[data-dark]");
  const size = preview.querySelector(".html-preview-size");
  const widths = [...preview.querySelectorAll("[data-width]")];
  const base = preview.dataset.htmlSrc;

  function remember(key, value) {
    try { localStorage.setItem(`inboxd.preview.${key}`, value); } catch { /* storage off: not kept */ }
  }
  function recall(key) {
    try { return localStorage.getItem(`inboxd.preview.${key}`); } catch { return null; }
  }

  function showWidth(width) {
    if (!widths.some((b) => b.dataset.width === width)) width = "desktop";
    for (const button of widths) button.setAttribute("aria-pressed", String(button.dataset.width === width));
    if (width === "desktop") delete preview.dataset.width; else preview.dataset.width = width;
    size.textContent = width === "desktop" ? "" : `${width} px wide`;
    remember("width", width);
  }

  function showDark(on) {
    dark.setAttribute("aria-pressed", String(on));
    if (on) preview.dataset.dark = ""; else delete preview.dataset.dark;
    const url = new URL(base, window.location.href);
    if (on) url.searchParams.set("dark", "1");
    const src = url.pathname + url.search;
    if (frame.getAttribute("src") !== src) frame.setAttribute("src", src);
    remember("dark", on ? "1" : "0");
  }

  for (const button of widths) button.addEventListener("click", () => showWidth(button.dataset.width));
  dark.addEventListener("click", () => showDark(dark.getAttribute("aria-pressed") !== "true"));
  showWidth(recall("width") || "desktop");
  showDark(recall("dark") === "1");
  bar.hidden = false;
})();
