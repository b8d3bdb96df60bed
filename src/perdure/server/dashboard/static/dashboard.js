// Live pages: every two seconds the server renders this page's <main> again and it
// replaces the old one (the server escapes every value, so its HTML is safe to use).
// Paused while a form field has the focus, so typing is never lost.
(function () {
  "use strict";
  var live = document.body.getAttribute("data-live") === "1";
  if (!live) return;
  function typing() {
    var el = document.activeElement;
    return el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA");
  }
  function refresh() {
    if (document.hidden || typing()) return;
    fetch(window.location.href, { headers: { "X-Perdure-Fragment": "main" }, credentials: "same-origin" })
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var main = document.getElementById("main");
        if (main && !typing()) main.innerHTML = html;
        if (html.indexOf('data-ended="1"') !== -1) {
          document.body.setAttribute("data-live", "0");
          var flag = document.getElementById("live-flag");
          if (flag) flag.textContent = "";
        }
      })
      .catch(function () {});
  }
  setInterval(refresh, 2000);
})();
