// The console's one script. Nothing in the console needs it: without it the
// pages are the same, in UTC, refreshed by hand. With it, times are shown in
// the viewer's time zone, and a running run's page follows the run over its
// event stream (GET /v1/runs/{id}/events, with the session cookie): at each
// event the page's main part is fetched again from the server, which renders
// everything, escaped, as it does for a reload.
(function () {
  "use strict";

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) {
        return;
      }
      el.textContent = d.toLocaleString(undefined, {
        year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit",
        hour12: false, timeZoneName: "short"
      });
    });
  }

  // typing reports whether the person is filling in a form of the page: a
  // refresh then waits for the next event rather than lose what they typed.
  function typing() {
    var el = document.activeElement;
    return el && el.closest && el.closest("main form") !== null &&
      (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT");
  }

  // refresh fetches the page again and swaps in its main part. While the
  // person fills in a form of the page it waits until they leave the field,
  // rather than lose what they typed.
  var waiting = false;
  function refresh() {
    if (typing()) {
      if (!waiting) {
        waiting = true;
        document.activeElement.addEventListener("blur", function () {
          waiting = false;
          refresh();
        }, {once: true});
      }
      return;
    }
    fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (res) { return res.ok ? res.text() : null; })
      .then(function (html) {
        if (html === null) {
          return;
        }
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        var main = document.querySelector("main");
        if (fresh && main) {
          main.replaceWith(document.adoptNode(fresh));
          localTimes(document);
        }
      })
      .catch(function () { /* the next event tries again */ });
  }

  function follow() {
    var live = document.querySelector("main .live[data-events]");
    if (!live || !window.EventSource) {
      return;
    }
    var events = new EventSource(live.getAttribute("data-events"));
    var timer = null;
    function soon() {
      if (timer === null) {
        timer = window.setTimeout(function () { timer = null; refresh(); }, 250);
      }
    }
    // A node's step or attempt changes the page; the agent's own events
    // (many, and not on the page) do not.
    ["checkpoint", "attempt"].forEach(function (type) {
      events.addEventListener(type, soon);
    });
    // "run": the run ended or parked, the stream's last event.
    events.addEventListener("run", function () {
      events.close();
      refresh();
    });
    events.addEventListener("error", function (ev) {
      if (ev.data) { // the server's own error event: the stream is over
        events.close();
      }
    });
  }

  localTimes(document);
  follow();
})();
