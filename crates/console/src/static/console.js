// gpushare console: follow the server's events and refresh the page's <main> when
// the fleet changes (no reload). Plain JavaScript, no dependencies.
(function () {
  "use strict";
  if (!window.EventSource) { return; }
  var live = document.getElementById("live");
  var busy = false;
  var wanted = null;
  function refresh(version) {
    if (String(version) === document.body.getAttribute("data-version")) { return; }
    wanted = version;
    if (busy) { return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var next = doc.querySelector("main");
        var here = document.querySelector("main");
        if (next && here) {
          here.replaceWith(document.importNode(next, true));
          document.body.setAttribute("data-version", doc.body.getAttribute("data-version"));
        }
      })
      .catch(function () { if (live) { live.textContent = "read-only (refresh failed)"; } })
      .then(function () {
        busy = false;
        if (wanted !== null && String(wanted) !== document.body.getAttribute("data-version")) {
          var w = wanted; wanted = null; refresh(w);
        }
      });
  }
  var source = new EventSource("/events");
  source.addEventListener("fleet", function (e) {
    if (live) { live.textContent = "live"; live.className = "live on"; }
    refresh(e.data);
  });
  source.onerror = function () {
    if (live) { live.textContent = "reconnecting"; live.className = "live"; }
  };
})();
