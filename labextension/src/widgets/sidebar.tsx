/**
 * The det_hub panel in JupyterLab's left area: the experiments (live) and the cluster. The
 * master is asked again every few seconds only while the panel is visible; a collapsed
 * panel, or a hidden browser tab, asks nothing.
 */

import { ReactWidget } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import * as React from 'react';

import { errorText } from '../api/client';
import { ExperimentAction, IDetHubConfig, IExperiment } from '../api/types';
import { ClusterModel } from '../model/cluster';
import { ExperimentListModel } from '../model/experiments';
import { VisiblePoll } from '../model/poll';
import { ClusterView } from './clusterView';
import { ExperimentList } from './experimentList';
import { detHubIcon } from './icon';

export type SidebarTab = 'experiments' | 'cluster';

export interface ISidebarOptions {
  experiments: ExperimentListModel;
  cluster: ClusterModel;
  onOpen: (experimentId: number) => void;
  onAction: (experiment: IExperiment, action: ExperimentAction) => Promise<void>;
  onPriority: (experiment: IExperiment) => Promise<void>;
  /** Milliseconds between looks at the master while visible (default 3000). */
  interval?: number;
}

export class DetHubSidebar extends ReactWidget {
  constructor(options: ISidebarOptions) {
    super();
    this.id = 'det-hub-sidebar';
    this.addClass('jp-DetHub-sidebar');
    this.title.icon = detHubIcon;
    this.title.caption = 'det_hub: experiments and cluster';
    this._options = options;
    this.experiments = options.experiments;
    this.cluster = options.cluster;
    this.experiments.changed.connect(this._onChanged, this);
    this.cluster.changed.connect(this._onChanged, this);
    this._poll = new VisiblePoll({
      name: 'det-hub:sidebar',
      interval: options.interval ?? 3000,
      isVisible: () => this.isVisible,
      factory: () => this._refresh()
    });
  }

  readonly experiments: ExperimentListModel;
  readonly cluster: ClusterModel;

  get tab(): SidebarTab {
    return this._tab;
  }

  set tab(tab: SidebarTab) {
    if (tab !== this._tab) {
      this._tab = tab;
      this.update();
      void this._poll.wake();
    }
  }

  /** Who the notebook server acts as on the master, and any problem reaching it. */
  setConfig(config: IDetHubConfig | null, problem: string | null = null): void {
    this._config = config;
    this._problem = problem ?? config?.problem ?? null;
    this.experiments.user = config?.user?.username ?? null;
    this.update();
    void this._poll.wake();
  }

  /** Asks the master now (after a change made here). */
  refresh(): Promise<void> {
    return this._poll.wake();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this._poll.wake();
  }

  protected render(): JSX.Element {
    const options = this._options;
    const user = this._config?.user;
    return (
      <div className="jp-DetHub-panel">
        <header className="jp-DetHub-header">
          <h2>det_hub</h2>
          {user ? <span className="jp-DetHub-user">{user.username}</span> : null}
        </header>
        <div className="jp-DetHub-tabs" role="tablist">
          {(['experiments', 'cluster'] as const).map(tab => (
            <button
              key={tab}
              role="tab"
              className="jp-DetHub-tab"
              aria-selected={this._tab === tab}
              data-tab={tab}
              onClick={() => {
                this.tab = tab;
              }}
            >
              {tab === 'experiments' ? 'Experiments' : 'Cluster'}
            </button>
          ))}
        </div>
        {this._problem ? (
          <p className="jp-DetHub-error jp-DetHub-problem">{this._problem}</p>
        ) : null}
        <div className="jp-DetHub-body">
          {this._tab === 'experiments' ? (
            <ExperimentList
              model={this.experiments}
              onOpen={experiment => options.onOpen(experiment.id)}
              onAction={(experiment, action) => void options.onAction(experiment, action)}
              onPriority={experiment => void options.onPriority(experiment)}
              onRefresh={() => void this.refresh()}
            />
          ) : (
            <ClusterView model={this.cluster} onOpenExperiment={options.onOpen} />
          )}
        </div>
      </div>
    );
  }

  private async _refresh(): Promise<void> {
    try {
      await (this._tab === 'experiments' ? this.experiments.refresh() : this.cluster.refresh());
    } catch (error) {
      // Shown by the view; the poll tries again, less often.
      console.warn(`det_hub: ${errorText(error)}`);
      throw error;
    }
  }

  private _onChanged(): void {
    this.update();
  }

  private _tab: SidebarTab = 'experiments';
  private _config: IDetHubConfig | null = null;
  private _problem: string | null = null;
  private readonly _options: ISidebarOptions;
  private readonly _poll: VisiblePoll;
}
