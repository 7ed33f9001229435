import { LabIcon } from '@jupyterlab/ui-components';

/** The panel's icon: three stacked layers (experiments, trials, checkpoints) in JupyterLab's
 * icon colour. */
const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 2 2 7l10 5 10-5-10-5z"/>
    <path d="M2 12l10 5 10-5-2.2-1.1L12 14.8 4.2 10.9z"/>
    <path d="M2 17l10 5 10-5-2.2-1.1L12 19.8l-7.8-3.9z"/>
  </g>
</svg>`;

export const detHubIcon = new LabIcon({ name: 'det-hub:icon', svgstr });
