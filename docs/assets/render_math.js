// Typeset the maths pymdownx.arithmatex leaves in <span|div class="arithmatex"> with the vendored KaTeX
// (no network). Material's instant navigation is off, so running once per page load is enough.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".arithmatex").forEach(function (element) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  });
});
