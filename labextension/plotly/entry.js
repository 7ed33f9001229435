// The Plotly.js the master's pages load: its core (which draws line and scatter charts) and the
// parallel coordinates of the search view, nothing else. A quarter of the full bundle, so that
// an experiment's page has its charts drawn about a second sooner on a cold load.
import Plotly from 'plotly.js/lib/core';
import parcoords from 'plotly.js/lib/parcoords';

Plotly.register([parcoords]);
globalThis.Plotly = Plotly;
