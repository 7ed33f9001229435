/**
 * det_hub in JupyterLab: the sidebar panel (experiments and cluster), experiment views and
 * comparisons of experiments in the main area, and experiments created from a config file in
 * the file browser.
 */

import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  MainAreaWidget,
  Notification,
  showDialog,
  showErrorMessage,
  WidgetTracker
} from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';

import { confirmAction, confirmPriority } from './actions';
import { DetHubClient, errorText } from './api/client';
import { ExperimentAction, IExperiment, IUser } from './api/types';
import { ClusterModel } from './model/cluster';
import { ExperimentListModel } from './model/experiments';
import { drawsDetHubCharts } from './model/notebookCharts';
import { registerCheckpointDialog } from './registry';
import { loadPlotly } from './widgets/chart';
import { CompareView } from './widgets/compareView';
import { ExperimentView } from './widgets/experimentView';
import { detHubIcon } from './widgets/icon';
import { DetHubSidebar } from './widgets/sidebar';

/** The command ids. */
export namespace CommandIDs {
  export const openExperiment = 'det-hub:open-experiment';
  export const compareExperiments = 'det-hub:compare-experiments';
  export const createFromFile = 'det-hub:create-experiment';
  export const createFromCurrentFile = 'det-hub:create-experiment-from-current-file';
  export const insertLoadCheckpoint = 'det-hub:insert-load-checkpoint';
  export const showPanel = 'det-hub:show-panel';
}

/** Whether a path names an experiment config (a YAML file). */
export function isConfigPath(path: string | null | undefined): boolean {
  return !!path && /\.ya?ml$/i.test(path);
}

/** The code that loads a checkpoint in a notebook. */
export function loadCheckpointCode(uuid: string): string {
  return `import det_hub\n\nmodel = det_hub.load_checkpoint(${JSON.stringify(uuid)})`;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'det-hub-labextension:plugin',
  description: 'The det_hub panel: experiments, trials, checkpoints and the cluster.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, IDefaultFileBrowser, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    fileBrowser: IDefaultFileBrowser | null,
    notebooks: INotebookTracker | null
  ): void => {
    const { commands, shell } = app;
    const client = new DetHubClient({ serverSettings: app.serviceManager.serverSettings });
    const views = new WidgetTracker<MainAreaWidget<ExperimentView>>({
      namespace: 'det-hub-experiment'
    });

    const viewOf = (id: number): MainAreaWidget<ExperimentView> | undefined =>
      views.find(w => w.content.model.id === id);
    const comparisons = new WidgetTracker<MainAreaWidget<CompareView>>({
      namespace: 'det-hub-compare'
    });

    const onAction = async (
      experiment: IExperiment,
      action: ExperimentAction
    ): Promise<IExperiment | null> => {
      const updated = await confirmAction(client, experiment, action);
      if (updated) {
        // At once; what follows (STOPPING_... to CANCELED) comes through the list's stream.
        sidebar.experiments.update(updated);
        viewOf(updated.id)?.content.model.update(updated);
      }
      return updated;
    };
    const onPriority = async (experiment: IExperiment): Promise<void> => {
      if ((await confirmPriority(client, experiment)) !== null) {
        void sidebar.refresh();
        void viewOf(experiment.id)?.content.model.refresh();
      }
    };

    // Who the notebook server acts as on the master: the panel offers actions on their own
    // experiments only (on all, to an admin).
    let viewer: IUser | null = null;
    const sidebar = new DetHubSidebar({
      experiments: new ExperimentListModel(client),
      cluster: new ClusterModel(client),
      onOpen: id => void commands.execute(CommandIDs.openExperiment, { id }),
      onAction: async (experiment, action) => {
        await onAction(experiment, action);
      },
      onPriority,
      onOpenQuickstart: () => void openQuickstart(app),
      onCompare: ids => void commands.execute(CommandIDs.compareExperiments, { ids })
    });
    shell.add(sidebar, 'left', { rank: 650 });
    restorer?.add(sidebar, sidebar.id);
    client
      .config()
      .then(config => {
        viewer = config.user;
        sidebar.setConfig(config);
      })
      .catch(error => sidebar.setConfig(null, `det_hub is not reachable: ${errorText(error)}`));

    commands.addCommand(CommandIDs.showPanel, {
      label: 'Show the det_hub panel',
      icon: detHubIcon,
      execute: () => shell.activateById(sidebar.id)
    });

    commands.addCommand(CommandIDs.openExperiment, {
      label: args =>
        args.id !== undefined
          ? `Open det_hub experiment ${String(args.id)}`
          : 'Open det_hub experiment',
      icon: detHubIcon,
      execute: async args => {
        const id = Number(args.id);
        if (!Number.isInteger(id)) {
          return;
        }
        let widget = viewOf(id);
        if (!widget) {
          const content = new ExperimentView({
            client,
            experimentId: id,
            onAction,
            onPriority,
            viewer: () => viewer,
            onInsertCode: uuid => void commands.execute(CommandIDs.insertLoadCheckpoint, { uuid }),
            onRegister: (experiment, checkpoint) =>
              registerCheckpointDialog(client, experiment, checkpoint)
          });
          widget = new MainAreaWidget({ content });
          widget.id = `det-hub-experiment-${id}`;
          widget.title.label = `Experiment ${id}`;
          widget.title.icon = detHubIcon;
          widget.title.closable = true;
          shell.add(widget, 'main');
          await views.add(widget);
        }
        shell.activateById(widget.id);
        return widget;
      }
    });

    commands.addCommand(CommandIDs.compareExperiments, {
      label: 'Compare det_hub experiments',
      caption: 'The best trial of each experiment side by side, their curves on one chart',
      icon: detHubIcon,
      execute: async args => {
        const ids = (Array.isArray(args.ids) ? args.ids : []).map(Number);
        const key = ids.join(',');
        let widget = comparisons.find(w => w.content.model.ids.join(',') === key);
        if (!widget) {
          let content: CompareView;
          try {
            content = new CompareView({
              client,
              ids,
              onOpen: id => void commands.execute(CommandIDs.openExperiment, { id })
            });
          } catch (error) {
            await showErrorMessage('Cannot compare these experiments', errorText(error));
            return;
          }
          widget = new MainAreaWidget({ content });
          widget.id = `det-hub-compare-${content.model.ids.join('-')}`;
          widget.title.label = content.title.label;
          widget.title.caption = content.title.caption;
          widget.title.icon = detHubIcon;
          widget.title.closable = true;
          shell.add(widget, 'main');
          await comparisons.add(widget);
        }
        shell.activateById(widget.id);
        return widget;
      }
    });

    // A notebook that draws det_hub's charts gets Plotly.js loaded while its kernel starts.
    notebooks?.widgetAdded.connect((_, panel) => {
      void panel.context.ready.then(() => {
        const cells = panel.content.model?.sharedModel.cells ?? [];
        if (drawsDetHubCharts(cells.map(cell => cell.getSource()))) {
          void loadPlotly().catch(() => undefined);
        }
      });
    });

    commands.addCommand(CommandIDs.insertLoadCheckpoint, {
      label: 'Insert code to load a det_hub checkpoint',
      execute: async args => {
        const uuid = String(args.uuid ?? '');
        const panel = notebooks?.currentWidget;
        if (!panel) {
          await showErrorMessage(
            'No notebook to insert into',
            'Open a notebook (and select a cell) to insert the code that loads this checkpoint.'
          );
          return;
        }
        const notebook = panel.content;
        const active = notebook.activeCell;
        const emptyCode =
          active?.model.type === 'code' && active.model.sharedModel.getSource().trim() === '';
        if (!emptyCode) {
          NotebookActions.insertBelow(notebook);
          NotebookActions.changeCellType(notebook, 'code');
        }
        notebook.activeCell?.model.sharedModel.setSource(loadCheckpointCode(uuid));
        shell.activateById(panel.id);
      }
    });

    /** Asks, then creates an experiment from a config file; its folder is the context. */
    const createFromPath = async (path: string): Promise<void> => {
      const configPath = app.serviceManager.contents.localPath(path);
      const contextDir = PathExt.dirname(configPath);
      const folder = contextDir ? `${contextDir}/` : 'the root folder';
      const result = await showDialog({
        title: 'Create det_hub experiment',
        body:
          `Create an experiment from the config ${configPath}, with ${folder} as its ` +
          'context (the files its trials run with, less those .detignore names)?',
        buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Create' })]
      });
      if (!result.button.accept) {
        return;
      }
      // Packing a large context takes a while on the server: say so meanwhile.
      const toast = Notification.emit(
        `Packing ${folder} and creating an experiment from ${configPath}…`,
        'in-progress',
        { autoClose: false }
      );
      try {
        const experiment = await client.createExperimentFromPath(configPath, contextDir);
        Notification.update({
          id: toast,
          message: `Experiment ${experiment.id} (${experiment.name}) created`,
          type: 'success',
          autoClose: 8000,
          actions: [
            {
              label: 'Open',
              callback: () =>
                void commands.execute(CommandIDs.openExperiment, { id: experiment.id })
            }
          ]
        });
      } catch (error) {
        Notification.dismiss(toast);
        await showErrorMessage(
          `Could not create an experiment from ${configPath}`,
          errorText(error)
        );
      }
    };

    const selectedConfig = (): string | null => {
      const item = fileBrowser?.selectedItems().next();
      const model = item && !item.done ? item.value : null;
      return model && model.type !== 'directory' && isConfigPath(model.path) ? model.path : null;
    };

    commands.addCommand(CommandIDs.createFromFile, {
      label: 'Create det_hub experiment',
      caption: "Create a det_hub experiment from this config, with the file's folder as context",
      icon: detHubIcon,
      isVisible: () => selectedConfig() !== null,
      execute: async () => {
        const path = selectedConfig();
        if (path) {
          await createFromPath(path);
        }
      }
    });
    app.contextMenu.addItem({
      command: CommandIDs.createFromFile,
      selector: '.jp-DirListing-item[data-file-type="yaml"]',
      rank: 3
    });

    const currentConfig = (): string | null => {
      const current = shell.currentWidget ? docPath(shell.currentWidget) : null;
      return isConfigPath(current) ? current : selectedConfig();
    };
    commands.addCommand(CommandIDs.createFromCurrentFile, {
      label: 'Create det_hub experiment from the current file',
      caption: 'The open (or selected) YAML config, with its folder as the context',
      icon: detHubIcon,
      isEnabled: () => currentConfig() !== null,
      execute: async () => {
        const path = currentConfig();
        if (path) {
          await createFromPath(path);
        }
      }
    });

    if (palette) {
      const category = 'det_hub';
      palette.addItem({ command: CommandIDs.showPanel, category });
      palette.addItem({ command: CommandIDs.createFromCurrentFile, category });
    }
    if (restorer) {
      void restorer.restore(views, {
        command: CommandIDs.openExperiment,
        args: widget => ({ id: widget.content.model.id }),
        name: widget => String(widget.content.model.id)
      });
      void restorer.restore(comparisons, {
        command: CommandIDs.compareExperiments,
        args: widget => ({ ids: [...widget.content.model.ids] }),
        name: widget => widget.content.model.ids.join('-')
      });
    }
  }
};

/** The quickstart notebook, as a new user's first server has it at the top of its root. */
const QUICKSTART = 'quickstart.ipynb';

/** Opens the quickstart notebook, or says where it would be and how to get it. */
async function openQuickstart(app: JupyterFrontEnd): Promise<void> {
  try {
    await app.serviceManager.contents.get(QUICKSTART, { content: false });
  } catch {
    await showErrorMessage(
      'No quickstart notebook here',
      `There is no ${QUICKSTART} at the top of this server's folder. det_hub copies it there ` +
        "on a user's first server; it also comes with det_hub's source, in examples/."
    );
    return;
  }
  await app.commands.execute('docmanager:open', { path: QUICKSTART });
}

/** The path of the document a main-area widget shows, when it shows one. */
function docPath(widget: unknown): string | null {
  const context = (widget as { context?: { path?: unknown } }).context;
  return context && typeof context.path === 'string' ? context.path : null;
}

export default [plugin];
