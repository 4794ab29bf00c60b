// Templates: named spawn definitions with their base snapshots and warm pools (template-ops.ts).
import type { TemplateBody, TemplateRow, TemplateStore } from "../../store/templates.js";
import type { TemplateOps } from "../sandboxes/template-ops.js";

export class TemplatesFacade {
  constructor(
    private readonly store: Pick<TemplateStore, "list">,
    private readonly ops: TemplateOps,
  ) {}

  /** Every stored template, by name. */
  list(): TemplateRow[] {
    return this.store.list();
  }

  /** A template by name; 404 when there is none. */
  get(name: string): TemplateRow {
    return this.ops.getTemplate(name);
  }

  /** Stores a new template (false when the name is taken) and starts its warm pool. */
  async create(t: TemplateBody): Promise<boolean> {
    return this.ops.createTemplate(t);
  }

  /** Replaces a template; its base snapshots and warm VMs are remade from the new definition. */
  async replace(t: TemplateBody): Promise<boolean> {
    return this.ops.replaceTemplate(t);
  }

  /** Makes the stored templates agree with these (the config file's); returns the names created or replaced. */
  async apply(templates: TemplateBody[]): Promise<string[]> {
    return this.ops.applyTemplates(templates);
  }

  /** Deletes a template with its base snapshots and warm VMs. */
  async remove(name: string): Promise<boolean> {
    return this.ops.deleteTemplate(name);
  }
}
