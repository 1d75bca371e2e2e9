"""The run viewer's page (index.html, view.css, view*.js): package data that `scgmem.report.view.site` copies
next to the data; a package only so that setuptools ships the folder without a warning."""
