// Progressive enhancement only: every page works without this file.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // A notice after a redirect (?notice=...) is said once: the address loses it, so a reload, a
  // bookmark or a shared link does not say it again.
  const here = new URL(window.location.href);
  if (here.searchParams.has("notice")) {
    here.searchParams.delete("notice");
    history.replaceState(history.state, "", here.pathname + here.search + here.hash);
  }
  // Copy buttons: <button data-copy="#id"> copies the value of that input, or the text of that element.
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const target = document.querySelector(button.dataset.copy);
    if (!target || !navigator.clipboard) continue;
    button.hidden = false;
    const label = button.textContent;
    button.addEventListener("click", async () => {
      const isField = "value" in target && typeof target.select === "function";
      try {
        await navigator.clipboard.writeText(isField ? target.value : target.textContent);
        button.textContent = "Copied";
      } catch {
        if (isField) target.select();
        else window.getSelection().selectAllChildren(target);
        button.textContent = "Press Ctrl+C";
      }
      setTimeout(() => { button.textContent = label; }, 2000);
    });
  }
  // Select the whole token on focus, so a manual copy takes all of it.
  for (const input of document.querySelectorAll("input[readonly].token-value")) {
    input.addEventListener("focus", () => input.select());
  }
  // Confirmations: a submit button with data-confirm asks first.
  for (const button of document.querySelectorAll("button[data-confirm]")) {
    button.addEventListener("click", (event) => {
      if (!window.confirm(button.dataset.confirm)) event.preventDefault();
    });
  }
  // A form with data-confirm-when="field=value" asks first when that field is changed to that value.
  for (const form of document.querySelectorAll("form[data-confirm-when]")) {
    const [name, value] = form.dataset.confirmWhen.split("=");
    const field = form.elements.namedItem(name);
    if (!field) continue;
    const initial = field.value;
    form.addEventListener("submit", (event) => {
      if (field.value === value && initial !== value && !window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
});
