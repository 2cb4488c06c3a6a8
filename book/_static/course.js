/* The course's site behaviour. Loaded on every page by book/_ext/course_site.py. */
(() => {
  "use strict";

  /* 1. Sidebar toggles that work on every screen.
     pydata-sphinx-theme 0.17 and sphinx-book-theme 1.3 each bind their click handler to the
     FIRST element of class .primary-toggle / .secondary-toggle, which is the navbar's copy that
     sphinx-book-theme hides; the copy a reader sees in the article header gets no handler and
     only shows its tooltip. Every other copy forwards its click to the bound one, so the
     themes' own code opens the drawer (phone) or collapses the sidebar (desktop). */
  function bindToggles() {
    for (const kind of ["primary", "secondary"]) {
      const copies = Array.from(document.querySelectorAll(`.${kind}-toggle`));
      const bound = copies[0];
      copies.slice(1).forEach((copy) => {
        copy.setAttribute("aria-label", kind === "primary" ? "Table of contents" : "On this page");
        copy.addEventListener("click", (event) => {
          event.preventDefault();
          event.stopPropagation();
          bound.click();
        });
      });
    }
    /* A link to a place on this page closes the drawer, so the reader sees where it leads. */
    document.querySelectorAll("#pst-primary-sidebar-modal, #pst-secondary-sidebar-modal").forEach((dialog) => {
      dialog.addEventListener("click", (event) => {
        const link = event.target.closest && event.target.closest("a[href]");
        if (link && dialog.open && link.getAttribute("href").startsWith("#")) dialog.close();
      });
    });
  }

  /* 2. A click (or Enter) on a figure shows it full screen; a click, Escape or the button closes it. */
  function zoomableFigures() {
    const figures = document.querySelectorAll("article .cell_output img, article figure img");
    if (!figures.length) return;
    const dialog = document.createElement("dialog");
    dialog.className = "course-zoom";
    dialog.setAttribute("aria-label", "Figure, full screen");
    const close = document.createElement("button");
    close.type = "button";
    close.className = "course-zoom-close";
    close.textContent = "Close";
    dialog.append(close);
    document.body.append(dialog);
    // The full-screen copy exists only while it is shown: no image without a source on the page.
    let shown = null;
    dialog.addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => { if (shown) { shown.remove(); shown = null; } });
    figures.forEach((img) => {
      img.classList.add("course-zoomable");
      img.setAttribute("tabindex", "0");
      img.setAttribute("role", "button");
      const open = () => {
        if (!shown) { shown = document.createElement("img"); dialog.append(shown); }
        shown.src = img.currentSrc || img.src;
        shown.alt = img.alt;
        dialog.showModal();
      };
      img.addEventListener("click", open);
      img.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); open(); }
      });
    });
  }

  function start() {
    bindToggles();
    zoomableFigures();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
