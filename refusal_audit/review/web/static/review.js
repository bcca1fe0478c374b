// Keyboard shortcuts of the review app (the pages work without this file).
// a agree · d disagree · 1-99 category · y/n false positive · c clause · t note
// Enter submit and next · s skip · p previous · ? help · Esc close help / leave a field
// r (queue list) review the first queue with open items
(function () {
  "use strict";
  const $ = (sel) => document.querySelector(sel);
  const help = $("#help");

  function toggleHelp(show) {
    if (!help) return;
    help.hidden = show === undefined ? !help.hidden : !show;
  }
  document.querySelectorAll("[data-help-toggle]").forEach((el) =>
    el.addEventListener("click", () => toggleHelp()));

  const form = $("#verdict-form");
  const correction = $("#correction");

  function syncCorrection() {
    if (!correction) return;
    const disagree = $("#verdict-disagree");
    if (disagree && disagree.checked) correction.removeAttribute("data-hidden");
    else correction.setAttribute("data-hidden", "");
  }
  if (form) {
    form.addEventListener("change", syncCorrection);
    syncCorrection();
  }
  if (location.hash === "#saved" && $("#saved-note")) $("#saved-note").hidden = false;

  function check(sel) {
    const el = $(sel);
    if (!el) return false;
    el.checked = true;
    el.dispatchEvent(new Event("change", { bubbles: true }));
    return true;
  }

  // categories by number: one digit picks at once; a second digit within 0.8 s makes a
  // two-digit number (1 then 2 picks 12), so every category has a key sequence
  let digits = "";
  let digitsAt = 0;
  function pickCategory(digit) {
    const now = Date.now();
    const candidate = (now - digitsAt < 800 ? digits : "") + digit;
    digitsAt = now;
    const sel = (n) => 'input[name="corrected_category"][data-key="' + n + '"]';
    if ($(sel(candidate))) digits = candidate;
    else if ($(sel(digit))) digits = digit;
    else { digits = ""; return false; }
    check(sel(digits));
    check("#verdict-disagree");
    return true;
  }

  function typing(target) {
    if (!target) return false;
    const tag = target.tagName;
    return tag === "TEXTAREA" || tag === "SELECT" || target.isContentEditable ||
      (tag === "INPUT" && !["radio", "checkbox", "button", "submit"].includes(target.type));
  }

  document.addEventListener("keydown", (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === "Escape") {
      if (help && !help.hidden) { toggleHelp(false); ev.preventDefault(); return; }
      if (typing(ev.target)) { ev.target.blur(); ev.preventDefault(); }
      return;
    }
    if (typing(ev.target)) return; // shortcuts are off while typing in a field
    if (ev.key === "?") { toggleHelp(); ev.preventDefault(); return; }
    if (help && !help.hidden) return;
    if (!form) {
      // the queue list: r reviews the first queue with open items
      const start = document.querySelector("form[data-claim] button:not([disabled])");
      if (ev.key === "r" && start) { start.closest("form").requestSubmit(); ev.preventDefault(); }
      return;
    }
    let handled = true;
    switch (ev.key) {
      case "a": check("#verdict-agree"); break;
      case "d": check("#verdict-disagree"); break;
      case "y": check("#verdict-disagree"); check("#fp-yes"); break;
      case "n": check("#verdict-disagree"); check("#fp-no"); break;
      case "c": check("#verdict-disagree"); $("#clause").focus(); break;
      case "t": $("#note").focus(); break;
      case "s": $("#skip-form").requestSubmit(); break;
      case "p": if ($("#previous")) location.href = $("#previous").href; else handled = false; break;
      case "Enter": {
        const button = $("#submit-next");
        if (button) form.requestSubmit(button); else form.requestSubmit();
        break;
      }
      default:
        if (/^[0-9]$/.test(ev.key)) handled = pickCategory(ev.key);
        else handled = false;
    }
    if (handled) ev.preventDefault();
  });
})();
