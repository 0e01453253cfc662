// A closed "Going further" block opens when a link leads into it (the page's contents, an anchor) and when a
// search result's words are in it (Sphinx marks them with span.highlighted).
(function () {
  // A search result's summary is read from its page with fetch(), which a browser refuses for file:// pages:
  // opened from disk, the results list the pages and sections without it.
  if (window.location.protocol === "file:" && typeof DOCUMENTATION_OPTIONS !== "undefined") {
    DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;
  }
  function openAround(el) {
    for (; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") el.open = true;
    }
  }
  function openTarget() {
    const id = decodeURIComponent(window.location.hash.slice(1));
    const target = id && document.getElementById(id);
    if (!target) return;
    openAround(target);
    const block = target.querySelector(":scope > details.going-further");
    if (block) block.open = true;
  }
  window.addEventListener("hashchange", openTarget);
  window.addEventListener("load", function () {
    openTarget();
    document.querySelectorAll("details:not([open]) span.highlighted").forEach(openAround);
  });
})();
