// Templates: named spawn definitions with their base snapshots and warm pools (template-ops.ts).
import type { TemplateBody, TemplateRow } from "../../store/templates.js";
import type { Core } from "../core.js";
import type { Pull } from "../sandboxes/spawn-setup.js";
import * as templateOps from "../sandboxes/template-ops.js";

export class TemplatesFacade {
  constructor(
    private readonly core: Core,
    private readonly pull: Pull,
  ) {}

  /** Every stored template, by name. */
  list(): TemplateRow[] {
    return this.core.templates.list();
  }

  /** A template by name; 404 when there is none. */
  get(name: string): TemplateRow {
    return templateOps.getTemplate(this.core, name);
  }

  /** Stores a new template (false when the name is taken) and starts its warm pool. */
  async create(t: TemplateBody): Promise<boolean> {
    return templateOps.createTemplate(this.core, t, this.pull);
  }

  /** Replaces a template; its base snapshots and warm VMs are remade from the new definition. */
  async replace(t: TemplateBody): Promise<boolean> {
    return templateOps.replaceTemplate(this.core, t, this.pull);
  }

  /** Makes the stored templates agree with these (the config file's); returns the names created or replaced. */
  async apply(templates: TemplateBody[]): Promise<string[]> {
    return templateOps.applyTemplates(this.core, templates, this.pull);
  }

  /** Deletes a template with its base snapshots and warm VMs. */
  async remove(name: string): Promise<boolean> {
    return templateOps.deleteTemplate(this.core, name, this.pull);
  }
}
