// The console's only script: live progress of a bulk action, and forms
// that cannot be sent twice by a double click. Pages work without it.
(function () {
  "use strict";

  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (form.method.toLowerCase() !== "post") { return; }
    if (form.dataset.sent) { e.preventDefault(); return; }
    form.dataset.sent = "1";
  });

  var box = document.querySelector("[data-progress-url]");
  if (!box) { return; }
  var bar = document.getElementById("bulk-progress");
  var text = document.getElementById("bulk-text");
  var error = document.getElementById("bulk-error");
  var status = document.getElementById("status");

  function show(p) {
    bar.max = Math.max(p.expected, p.done, 1);
    bar.value = p.done;
    text.textContent = p.done + " of " + p.expected + " done: " + p.ok + " ok, " + p.refused + " refused." +
      (p.finished ? " Finished." : "");
    error.textContent = p.error || "";
    if (p.finished) {
      status.textContent = p.error ? "Stopped: " + p.error :
        "Finished: " + p.ok + " of " + p.done + " done, " + p.refused + " refused.";
    }
  }

  function poll() {
    fetch(box.dataset.progressUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (p) {
        show(p);
        if (!p.finished) { setTimeout(poll, 300); }
      })
      .catch(function () { setTimeout(poll, 2000); });
  }
  poll();
})();
