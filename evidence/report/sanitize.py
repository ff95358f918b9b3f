"""What makes the HTML pages the tool writes safe to open: author-supplied Markdown (a release's notes.md)
becomes HTML only through nh3 (a maintained allow-list sanitiser), and every page carries a
Content-Security-Policy that allows nothing but its own inline style and embedded (data:) images, so even
markup that got through could run no script and load nothing."""

from __future__ import annotations

# No script-src: no page runs a script. style-src 'unsafe-inline': the pages' one <style> block (nh3 strips
# style attributes and <style> from author text). img-src data:: the embedded figures.
CSP = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

_URL_SCHEMES = {"http", "https", "mailto"}  # never javascript:, data: or vbscript: in a link


def clean_html(html: str) -> str:
    """Author HTML reduced to nh3's allow-list of tags and attributes (no script, no event handlers, no style),
    links only to http(s), mailto or relative URLs."""
    import nh3

    return nh3.clean(html, url_schemes=_URL_SCHEMES)


def markdown_html(text: str) -> str:
    """Author Markdown as sanitised HTML (the only output of this module meant for `|safe`)."""
    import markdown

    return clean_html(markdown.markdown(text, extensions=["tables"], output_format="html")) if text else ""
