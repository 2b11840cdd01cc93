// Trellis web UI: live regions and confirmations. No dependencies.
(function () {
  "use strict";
  // A region with data-live="ms" is refreshed from the same URL with
  // ?partial=1 until the refreshed content carries data-final.
  function live(el) {
    var every = parseInt(el.getAttribute("data-live"), 10) || 2000;
    var timer = null;
    var busy = false;
    function schedule() { timer = setTimeout(tick, every); }
    function tick() {
      if (document.hidden || busy) { schedule(); return; }
      busy = true;
      var u = new URL(window.location.href);
      u.searchParams.set("partial", "1");
      fetch(u.toString(), { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (r.redirected || !r.ok) { throw new Error("status " + r.status); }
          return r.text();
        })
        .then(function (html) {
          el.innerHTML = html;
          el.classList.remove("stale");
          busy = false;
          if (!el.querySelector("[data-final]")) { schedule(); }
        })
        .catch(function () { el.classList.add("stale"); busy = false; schedule(); });
    }
    schedule();
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && timer) { clearTimeout(timer); tick(); }
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(live);
  });
  // Forms with data-confirm ask first (delegated: live regions replace them).
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { e.preventDefault(); }
  });
})();
