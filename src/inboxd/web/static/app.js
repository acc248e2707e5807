// Progressive enhancement only: every page works without this file.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // Copy buttons: <button data-copy="#id"> copies the value of that input.
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const target = document.querySelector(button.dataset.copy);
    if (!target || !navigator.clipboard) continue;
    button.hidden = false;
    const label = button.textContent;
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(target.value);
        button.textContent = "Copied";
      } catch {
        target.select();
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
