"""Releases: freeze runs into a BagIt-compatible, tagged release, and verify one.

    layout.py          names, roles, payload paths, ReleaseError, Finding, path rules
    files.py           streamed hashing (sha256, git blob ids) and a link-safe inventory
    manifest.py        BagIt manifests: render and strict parse
    archive.py         the deterministic tar; safe extraction
    metadata.py        bag-info.txt, per-run provenance statements, seal (writes the manifests)
    regen.py           regenerate a run's analysis, figures and report from its raw files
    freeze.py          runs -> releases/<tag>/, its tar, one commit, an annotated tag
    verify/            `verify`: context.py (what checks share), checks_*.py (one module per area),
                       registry.py (the explicit check order; CHECK_IDS)
"""
