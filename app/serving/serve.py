"""``python -m trainledger.app.serving.serve run app/serving/asgi.py [Streamlit flags]``: ``streamlit run``, as ``trainledger dashboard`` starts it.

app/serving/asgi.py is an ``st.App`` (app/main.py behind the Host/Origin guard and the
sign-in routes), which ``streamlit run`` serves with uvicorn.

The one difference from the ``streamlit`` command: Streamlit's older multipage
mode is switched off before the first request. That mode runs any file in a
``pages/`` folder next to the entry script on its own, and Streamlit keeps it
on until the process first calls ``st.navigation``, so the first visitor of a
deep link such as ``/settings`` would get the page without app/main.py (pages
check access themselves as well: ``access.page_gate``).
"""

from __future__ import annotations

import sys
from typing import Optional


def main(argv: Optional[list[str]] = None) -> None:
    from trainledger.process import tune_gc

    tune_gc()
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a Streamlit without the flag has no older mode to switch off
        pass
    else:
        PagesManager.uses_pages_directory = False
    from streamlit.web import cli

    sys.argv = ["streamlit", *(sys.argv[1:] if argv is None else argv)]
    cli.main()


if __name__ == "__main__":
    main()
