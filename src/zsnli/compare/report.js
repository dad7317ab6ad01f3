// The one script of a bake-off report (zsnli.compare.render): the same in the command line's HTML file (inlined)
// and on the service's pages (/bakeoff/static/report.js). An arm's name in the ranking opens its view; the arm
// toggles hide arms and leave them out of the ceilings' pick; the ceilings name the best-ranked ticked arm inside
// every one of them, by the rule of zsnli.compare.engine.within_ceilings. Listeners sit on the document, so a
// report shown later (the service's form puts a result under itself) works too. No external code.
"use strict";

(function () {
  // An arm's name in the ranking opens its view (a <details>) and scrolls to it.
  function openArmView(event) {
    const link = event.target.closest && event.target.closest("a.arm-link");
    if (!link) return;
    const view = document.getElementById(link.getAttribute("href").slice(1));
    if (!view) return;
    event.preventDefault();
    view.open = true;
    view.scrollIntoView({ block: "start" });
  }

  // The first ticked, scored arm of the ranking whose figures fit every ceiling: an empty or disabled box is no
  // limit; a figure the arm lacks (an empty data attribute) never fits a limit on it.
  function applyCeilings(root) {
    const out = root.querySelector("#ceiling-best");
    if (!out) return;
    const limits = [...root.querySelectorAll("#ceilings input[data-figure]")]
      .filter((box) => !box.disabled && box.value !== "")
      .map((box) => [box.dataset.figure, Number(box.value)]);
    const best = [...root.querySelectorAll("#scorecard tbody tr.scored")].find((tr) => !tr.hidden &&
      limits.every(([figure, limit]) => {
        const value = tr.getAttribute(`data-ceiling-${figure.replace(/_/g, "-")}`);
        return value !== null && value !== "" && Number(value) <= limit;
      }));
    out.textContent = best ? best.dataset.arm : "no arm fits";
  }

  // Unticking an arm hides its ranking row; the ceilings then choose among the ticked arms.
  function applyToggles(root) {
    const ticked = new Set([...root.querySelectorAll("#arm-toggles input[name=arm-toggle]:checked")]
      .map((box) => box.value));
    root.querySelectorAll("#scorecard tbody tr[data-arm]").forEach((tr) => { tr.hidden = !ticked.has(tr.dataset.arm); });
    applyCeilings(root);
  }

  document.addEventListener("click", openArmView);
  document.addEventListener("input", (event) => {
    if (event.target.closest && event.target.closest("#ceilings")) applyCeilings(document);
  });
  document.addEventListener("change", (event) => {  // a box emptied without typing fires change only
    if (!event.target.closest) return;
    if (event.target.closest("#arm-toggles")) applyToggles(document);
    else if (event.target.closest("#ceilings")) applyCeilings(document);
  });
  window.zsnliReport = { applyCeilings, applyToggles };
})();
