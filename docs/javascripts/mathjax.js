// MathJax 3 for pymdownx.arithmatex (generic mode: \( \) inline, \[ \] display)
// and for the tutorials, whose Markdown cells write $ $ and $$ $$. Code blocks
// are never typeset; the pages have no other dollar signs in their text.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
  },
};

document$.subscribe(() => {
  MathJax.startup.output.clearCache();
  MathJax.typesetClear();
  MathJax.texReset();
  MathJax.typesetPromise();
});
