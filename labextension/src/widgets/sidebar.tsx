/**
 * The det_hub panel in JupyterLab's left area: the experiments and the cluster, both live.
 * While the experiment list is shown, it follows the master's experiment stream; while the
 * cluster tab is, the master's cluster stream. A collapsed panel, or a hidden browser tab,
 * holds no stream and asks nothing.
 */

import { ReactWidget } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import * as React from 'react';

import { ExperimentAction, IDetHubConfig, IExperiment } from '../api/types';
import { ClusterModel } from '../model/cluster';
import { CompareSelection } from '../model/compare';
import { ExperimentListModel } from '../model/experiments';
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
  onOpenQuickstart: () => void;
  /** Opens the comparison of these experiments in the main area. */
  onCompare: (experimentIds: number[]) => void;
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
    this.comparing.changed.connect(this._onChanged, this);
    document.addEventListener('visibilitychange', this._onVisibility);
  }

  readonly experiments: ExperimentListModel;
  readonly cluster: ClusterModel;
  /** The experiments ticked in the list to compare. */
  readonly comparing = new CompareSelection();

  get tab(): SidebarTab {
    return this._tab;
  }

  set tab(tab: SidebarTab) {
    if (tab !== this._tab) {
      this._tab = tab;
      this.update();
      this._follow();
    }
  }

  /** Who the notebook server acts as on the master, and any problem reaching it. */
  setConfig(config: IDetHubConfig | null, problem: string | null = null): void {
    this._config = config;
    this._configured = true;
    this._problem = problem ?? config?.problem ?? null;
    this.experiments.user = config?.user?.username ?? null;
    this.update();
    this._follow();
  }

  /**
   * Looks at the master now: the tab in sight takes a fresh snapshot when its stream is not
   * followed (changes come by themselves while it is).
   */
  async refresh(): Promise<void> {
    const model = this._tab === 'cluster' ? this.cluster : this.experiments;
    if (this._inSight(this._tab) && !model.live) {
      model.start();
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    document.removeEventListener('visibilitychange', this._onVisibility);
    this.experiments.stop();
    this.cluster.stop();
    this.comparing.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._follow();
  }

  protected onBeforeDetach(msg: Message): void {
    this.experiments.stop();
    this.cluster.stop();
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._follow();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._follow();
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
              viewer={this._config?.user ?? null}
              onOpen={experiment => options.onOpen(experiment.id)}
              onAction={(experiment, action) => void options.onAction(experiment, action)}
              onPriority={experiment => void options.onPriority(experiment)}
              onOpenQuickstart={options.onOpenQuickstart}
              comparing={this.comparing}
              onCompare={options.onCompare}
              onRefresh={() => {
                if (this._inSight('experiments')) {
                  this.experiments.restart();
                }
              }}
            />
          ) : (
            <ClusterView model={this.cluster} onOpenExperiment={options.onOpen} />
          )}
        </div>
      </div>
    );
  }

  /**
   * Whether a tab is in sight: the one chosen, in a shown panel of a shown page (the list once
   * the user it lists for is known).
   */
  private _inSight(tab: SidebarTab): boolean {
    return (
      (this._configured || tab === 'cluster') &&
      this._tab === tab &&
      this.isAttached &&
      this.isVisible &&
      !document.hidden
    );
  }

  /** Follows the master's stream of the tab in sight, and no other. */
  private _follow(): void {
    for (const [tab, model] of [
      ['experiments', this.experiments],
      ['cluster', this.cluster]
    ] as const) {
      if (this._inSight(tab)) {
        model.start();
      } else {
        model.stop();
      }
    }
  }

  private readonly _onVisibility = (): void => {
    this._follow();
  };

  private _onChanged(): void {
    this.update();
  }

  private _tab: SidebarTab = 'experiments';
  private _config: IDetHubConfig | null = null;
  /** Whether the config was asked for (answered or failed): the list waits for its user. */
  private _configured = false;
  private _problem: string | null = null;
  private readonly _options: ISidebarOptions;
}
