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
      // data-src: the page's own URL when the address bar holds a form's
      // (a form shown again with its error).
      var u = new URL(el.getAttribute("data-src") || window.location.href, window.location.href);
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
    refreshNow = function () {
      if (timer) { clearTimeout(timer); }
      tick();
    };
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && timer) { clearTimeout(timer); tick(); }
    });
  }
  // The run's event stream (server-sent events, read with fetch so that events
  // of any name arrive and Last-Event-ID resumes after a drop). Each event is
  // listed and refreshes the live region at once. Without a stream route (404)
  // the card stays hidden and the page keeps polling.
  var refreshNow = null;
  function stream(card) {
    var url = card.getAttribute("data-stream");
    var list = card.querySelector("#events");
    var state = card.querySelector("#stream-state");
    var last = "0";
    var ended = false;
    function show(ev) {
      var li = document.createElement("li");
      var seq = document.createElement("span");
      seq.className = "dim";
      seq.textContent = "#" + ev.id + " ";
      var name = document.createElement("b");
      name.textContent = ev.event || "message";
      var data = document.createElement("code");
      data.textContent = " " + (ev.data.length > 300 ? ev.data.slice(0, 300) + "…" : ev.data);
      li.appendChild(seq); li.appendChild(name); li.appendChild(data);
      li.setAttribute("data-event", ev.event || "message");
      list.appendChild(li);
      while (list.children.length > 500) { list.removeChild(list.firstChild); }
      if (refreshNow) { refreshNow(); }
    }
    function parse(block) {
      var ev = { id: "", event: "", data: "" };
      var lines = block.split("\n");
      var data = [];
      for (var i = 0; i < lines.length; i++) {
        var l = lines[i];
        if (l === "" || l.charAt(0) === ":") { continue; }
        var k = l.indexOf(":");
        var field = k < 0 ? l : l.slice(0, k);
        var value = k < 0 ? "" : l.slice(k + 1).replace(/^ /, "");
        if (field === "id") { ev.id = value; } else if (field === "event") { ev.event = value; } else if (field === "data") { data.push(value); }
      }
      ev.data = data.join("\n");
      return ev.id || ev.event || data.length ? ev : null;
    }
    function connect(retry) {
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/event-stream", "Last-Event-ID": last } })
        .then(function (r) {
          if (r.status === 404) { ended = true; return; }
          if (!r.ok || !r.body) { throw new Error("status " + r.status); }
          card.hidden = false;
          state.textContent = "connected";
          var reader = r.body.getReader();
          var dec = new TextDecoder();
          var buf = "";
          function pump() {
            return reader.read().then(function (res) {
              if (res.done) { return; }
              buf += dec.decode(res.value, { stream: true }).replace(/\r\n?/g, "\n");
              var cut;
              while ((cut = buf.indexOf("\n\n")) >= 0) {
                var ev = parse(buf.slice(0, cut));
                buf = buf.slice(cut + 2);
                if (ev) { if (ev.id) { last = ev.id; } show(ev); }
              }
              return pump();
            });
          }
          return pump().then(function () { ended = true; state.textContent = "ended"; });
        })
        .catch(function () {
          if (ended) { return; }
          state.textContent = "reconnecting…";
          setTimeout(function () { connect(Math.min((retry || 500) * 2, 10000)); }, retry || 500);
        });
    }
    connect(0);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(live);
    var card = document.querySelector("[data-stream]");
    if (card && window.fetch && window.TextDecoder) { stream(card); }
  });
  // Forms with data-confirm ask first (delegated: live regions replace them).
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { e.preventDefault(); }
  });
})();
