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

  // agentEvent puts one of the agents' events at the top of the page's
  // list: "Editing main.go", or what the gate refused and why. Every part
  // is set as text, never as markup.
  function agentEvent(a) {
    var list = document.querySelector("main ol.agent-events");
    if (!list) {
      return;
    }
    var none = document.querySelector("main .agent-events-none");
    if (none) {
      none.remove();
    }
    var li = document.createElement("li");
    var when = document.createElement("time");
    when.setAttribute("datetime", a.at || "");
    li.appendChild(when);
    li.appendChild(document.createTextNode(" "));
    var node = document.createElement("strong");
    node.textContent = a.node_id || "";
    li.appendChild(node);
    var text = a.text || ((a.kind || "") + (a.tool ? " " + a.tool : ""));
    if (a.decision && !a.decision.allowed) {
      li.className = "refused";
      var reasons = (a.decision.violations || []).map(function (v) { return v.message; }).join("; ");
      text += " (refused by the gate" + (reasons ? ": " + reasons : "") + ")";
    }
    li.appendChild(document.createTextNode(" " + text));
    localTimes(li);
    list.insertBefore(li, list.firstChild);
    var max = parseInt(list.getAttribute("data-max"), 10) || 20;
    while (list.children.length > max) {
      list.removeChild(list.lastChild);
    }
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
    // (many) are added to the page's list as they come, as text.
    ["checkpoint", "attempt"].forEach(function (type) {
      events.addEventListener(type, soon);
    });
    events.addEventListener("agent", function (ev) {
      var data;
      try {
        data = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      if (data && data.agent) {
        agentEvent(data.agent);
      }
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
