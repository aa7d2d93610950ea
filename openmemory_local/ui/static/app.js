// Open Memory's local page: a little JavaScript, none of it needed to use the page.
"use strict";
document.addEventListener("keydown", (event) => {
  // "/" focuses the search box, as on many sites
  const active = document.activeElement;
  const typing = active && (active.tagName === "INPUT" || active.tagName === "TEXTAREA" || active.isContentEditable);
  if (event.key === "/" && !typing) {
    const box = document.querySelector("#q") || document.querySelector("header.top input[type=search]");
    if (box) { event.preventDefault(); box.focus(); box.select(); }
  }
});
document.addEventListener("DOMContentLoaded", () => {
  // on an episode's page, bring the transcript line it points to into view when asked for
  const target = document.getElementById("target-line");
  if (target && location.hash === "#transcript") { target.scrollIntoView({block: "center"}); }
  // state-changing forms carry the CSRF token already; add it to those a script might build
  const token = document.querySelector('meta[name="csrf-token"]');
  document.querySelectorAll("form[method=post]").forEach((form) => {
    if (token && !form.querySelector("input[name=csrf]")) {
      const input = document.createElement("input");
      input.type = "hidden"; input.name = "csrf"; input.value = token.content;
      form.appendChild(input);
    }
    // a button pressed twice posts once
    form.addEventListener("submit", () => {
      form.querySelectorAll("button[type=submit]").forEach((b) => { b.disabled = true; });
    });
  });
});
